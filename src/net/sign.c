/* Signatures with the peer's identity, for records built outside net (group
 * records and signed averaging results in collab). */
#include <string.h>

#include "dedloc/util.h"
#include "net/net_internal.h"

const uint8_t *dl_net_public_key(const dl_net *net) { return net->id.pk; }

void dl_net_peer_id_from_key(const uint8_t pk[DL_NET_PUBLIC_KEY], char out[DL_PEER_ID_HEX]) {
    dl_peer_id_from_pk(pk, out);
}

void dl_net_sign(const dl_net *net, const void *data, size_t size, uint8_t sig[DL_NET_SIGNATURE]) {
    crypto_sign_detached(sig, NULL, data, size, net->id.sk);
}

int dl_net_verify(const char *peer_id, const uint8_t pk[DL_NET_PUBLIC_KEY], const void *data, size_t size,
                  const uint8_t sig[DL_NET_SIGNATURE]) {
    char derived[DL_PEER_ID_HEX];
    dl_peer_id_from_pk(pk, derived);
    if (!peer_id || strcmp(derived, peer_id)) return dl_fail("public key does not belong to peer %s", peer_id ? peer_id : "(none)");
    if (crypto_sign_verify_detached(sig, data, size, pk)) return dl_fail("bad signature by peer %s", peer_id);
    return 0;
}
