/* Peer identity: an ed25519 key pair kept in a file only its owner can read. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedloc/util.h"
#include "net/wire.h"

#define IDENTITY_MAGIC "dedloc-ed25519-v1\n"

void dl_peer_id_from_pk(const uint8_t pk[DL_WIRE_PK], char out[DL_PEER_ID_HEX]) {
    uint8_t h[16];
    crypto_generichash(h, sizeof h, pk, DL_WIRE_PK, NULL, 0);
    sodium_bin2hex(out, DL_PEER_ID_HEX, h, sizeof h);
}

static int create_identity(const char *path, struct dl_identity *id) {
    crypto_sign_keypair(id->pk, id->sk);
    uint8_t file[sizeof IDENTITY_MAGIC - 1 + crypto_sign_SEEDBYTES];
    memcpy(file, IDENTITY_MAGIC, sizeof IDENTITY_MAGIC - 1);
    crypto_sign_ed25519_sk_to_seed(file + sizeof IDENTITY_MAGIC - 1, id->sk);
    /* O_EXCL with mode 0600: the key is never readable by others, not even briefly. */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return dl_fail("cannot create identity file %s: %s", path, strerror(errno));
    ssize_t w = write(fd, file, sizeof file);
    int sync_rc = fsync(fd);
    close(fd);
    sodium_memzero(file, sizeof file);
    if (w != (ssize_t)sizeof file || sync_rc) {
        unlink(path);
        return dl_fail("cannot write identity file %s", path);
    }
    DL_INFO("net", "created identity %s", path);
    return 0;
}

int dl_identity_load(const char *path, struct dl_identity *id) {
    if (sodium_init() < 0) return dl_fail("libsodium failed to initialise");
    memset(id, 0, sizeof *id);
    if (!path || !*path) {
        crypto_sign_keypair(id->pk, id->sk);
    } else if (!dl_file_exists(path)) {
        if (create_identity(path, id)) return -1;
    } else {
        struct stat st;
        if (stat(path, &st)) return dl_fail("cannot stat identity file %s: %s", path, strerror(errno));
        if (st.st_mode & 077)
            return dl_fail("identity file %s is readable by others (mode %03o); chmod 600 it",
                           path, (unsigned)(st.st_mode & 0777));
        char *data;
        size_t size;
        if (dl_read_file(path, 4096, &data, &size)) return dl_fail_context("identity");
        size_t want = sizeof IDENTITY_MAGIC - 1 + crypto_sign_SEEDBYTES;
        int ok = size == want && !memcmp(data, IDENTITY_MAGIC, sizeof IDENTITY_MAGIC - 1);
        if (ok)
            crypto_sign_seed_keypair(id->pk, id->sk,
                                     (const uint8_t *)data + sizeof IDENTITY_MAGIC - 1);
        sodium_memzero(data, size);
        free(data);
        if (!ok) return dl_fail("%s is not a dedloc identity file", path);
    }
    dl_peer_id_from_pk(id->pk, id->peer_id);
    return 0;
}

int dl_net_identity_keys(const char *path, uint8_t pk[DL_NET_PUBLIC_KEY], uint8_t sk[64]) {
    struct dl_identity id;
    if (!path || !*path) return dl_fail("an identity file is needed");
    if (dl_identity_load(path, &id)) return -1;
    memcpy(pk, id.pk, DL_NET_PUBLIC_KEY);
    memcpy(sk, id.sk, 64);
    sodium_memzero(&id, sizeof id);
    return 0;
}
