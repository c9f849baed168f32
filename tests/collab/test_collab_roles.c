/* Roles from admission tokens at the averaging door (src/collab/roles.c):
 * a monitor-role peer is refused every averaging request, an aux-role peer
 * joins only as an auxiliary member, trainers and open runs pass. */
#include <string.h>

#include "collab/collab_internal.h"
#include "collab/inbox.h"
#include "dl_test.h"

int main(void) {
    uint8_t join[DL_AVG_JOIN_SIZE] = {2, DL_MEMBER_TRAINER};
    uint8_t aux_join[DL_AVG_JOIN_SIZE] = {2, DL_MEMBER_AUX};
    const int kinds[] = {EV_JOIN, EV_CHUNK, EV_RESULT, EV_FETCH, EV_REREDUCE, EV_CONTRIB, EV_ALIVE};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const char *why = dl_collab_role_refusal(DL_ROLE_MONITOR, kinds[k], join, sizeof join);
        CHECK_MSG(why && strstr(why, "monitor"), "a monitor's request of kind %d was taken", kinds[k]);
        CHECK(!dl_collab_role_refusal(DL_ROLE_TRAINER, kinds[k], join, sizeof join));
        CHECK(!dl_collab_role_refusal(DL_ROLE_NONE, kinds[k], join, sizeof join));
    }
    const char *why = dl_collab_role_refusal(DL_ROLE_AUX, EV_JOIN, join, sizeof join);
    CHECK_MSG(why && strstr(why, "aux"), "an aux token joined as a trainer");
    join[1] = DL_MEMBER_CLIENT;
    CHECK(dl_collab_role_refusal(DL_ROLE_AUX, EV_JOIN, join, sizeof join) != NULL);
    CHECK(!dl_collab_role_refusal(DL_ROLE_AUX, EV_JOIN, aux_join, sizeof aux_join));
    CHECK(!dl_collab_role_refusal(DL_ROLE_AUX, EV_RESULT, join, sizeof join));
    return dl_test_finish("test_collab_roles");
}
