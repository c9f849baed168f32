/* The entry of the network thread's command queue: the public functions of
 * rpc.c, dht.c and net.c post here from any thread; net.c's cmd_cb runs the
 * commands on the network thread. */
#include "net/net_internal.h"

int dl_net_post(struct dl_net *net, struct dl_cmd *cmd) {
    cmd->next = NULL;
    pthread_mutex_lock(&net->lock);
    if (net->cmd_tail) net->cmd_tail->next = cmd;
    else net->cmd_head = cmd;
    net->cmd_tail = cmd;
    pthread_mutex_unlock(&net->lock);
    event_active(net->cmd_ev, EV_READ, 0);
    return 0;
}
