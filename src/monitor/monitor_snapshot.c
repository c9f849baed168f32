/* The monitor keeps the run: every --checkpoint-every global steps it
 * downloads the swarm's state exactly as a newcomer does (donors chosen by
 * the param hash they signed, every chunk and the whole checked against it)
 * and writes a checkpoint `dedloc train --resume` continues, and every
 * --export-every steps a Hugging Face folder as `dedloc export` writes it.
 * So the run survives every trainer leaving. The download runs on a worker
 * thread: the event loop (HTTP, the swarm view) never waits for it. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "dedloc/util.h"
#include "monitor/monitor_internal.h"

int dl_monitor_snapshots_init(struct dl_monitor_snapshots *m, const char *model, int64_t max_steps,
                              double target_batch) {
    if (dl_albert_config_preset(model, &m->model) != 0) {
        dl_clear_error();
        if (dl_albert_config_load(model, &m->model)) return dl_fail_context("--model %s", model);
    }
    if (dl_param_layout_build(&m->model, &m->model_layout) || dl_train_layout_from_model(&m->model_layout, &m->layout))
        return -1;
    if (dl_albert_config_to_json(&m->model, &m->config_json)) return -1;
    /* Run settings a resumed trainer adopts unless it is given others: only
     * what the monitor was told, so a trainer's own defaults apply otherwise. */
    cJSON *run = cJSON_CreateObject();
    if (!run) return dl_fail("out of memory");
    cJSON_AddStringToObject(run, "model", model);
    if (max_steps > 0) cJSON_AddNumberToObject(run, "max_steps", (double)max_steps);
    if (target_batch > 0) cJSON_AddNumberToObject(run, "target_batch", target_batch);
    m->run_json = cJSON_PrintUnformatted(run);
    cJSON_Delete(run);
    if (!m->run_json) return dl_fail("out of memory");
    if (m->fetch_timeout_s <= 0) m->fetch_timeout_s = 120;
    return 0;
}

/* The first epoch at which a step of `every` is due after `last`. */
static uint64_t next_due(uint64_t last, int64_t every) { return (last / (uint64_t)every + 1) * (uint64_t)every; }

static bool due(const char *dir, int64_t every, uint64_t last, uint64_t epoch) {
    return dir && every > 0 && epoch >= next_due(last, every);
}

static void record_failure(struct dl_monitor_state *s, const char *what) {
    DL_WARN("monitor", "%s: %s", what, dl_error());
    pthread_mutex_lock(&s->lock);
    s->snap.failures++;
    snprintf(s->snap.last_error, sizeof s->snap.last_error, "%s: %s", what, dl_error());
    pthread_mutex_unlock(&s->lock);
}

static void save_checkpoint(struct dl_monitor_state *s, const dl_optimizer *opt, float *params,
                            const struct dl_collab_swarm_state *st, const char *hash_hex) {
    struct dl_monitor_snapshots *m = &s->snap;
    dl_checkpoint ck;
    dl_checkpoint_view(&ck, opt, params);
    ck.model_config_json = m->config_json;
    ck.run_json = m->run_json;
    dl_loss_scale_init(&ck.loss_scale, false);
    ck.progress.samples = st->samples;
    char path[4096];
    if (dl_checkpoint_save_in_dir(m->checkpoint_dir, &ck, m->keep, path, sizeof path)) {
        record_failure(s, "checkpoint of the swarm's state");
        return;
    }
    DL_INFO("monitor", "checkpoint of epoch %" PRIu64 " (param_hash %.16s) saved to %s", st->epoch, hash_hex, path);
    pthread_mutex_lock(&s->lock);
    m->checkpoint_epoch = st->epoch;
    m->checkpoint_time = dl_wall_time();
    snprintf(m->checkpoint_path, sizeof m->checkpoint_path, "%s", path);
    pthread_mutex_unlock(&s->lock);
}

static void save_export(struct dl_monitor_state *s, const float *params, const struct dl_collab_swarm_state *st) {
    struct dl_monitor_snapshots *m = &s->snap;
    char tok_name[4096];
    if (m->exporter.write(m->export_dir, &m->model, params, m->tokenizer, m->run_json, tok_name, sizeof tok_name)) {
        record_failure(s, "Hugging Face export of the swarm's state");
        return;
    }
    DL_INFO("monitor", "Hugging Face export of epoch %" PRIu64 " written to %s (tokenizer: %s)", st->epoch,
            m->export_dir, tok_name);
    pthread_mutex_lock(&s->lock);
    m->export_epoch = st->epoch;
    m->export_time = dl_wall_time();
    pthread_mutex_unlock(&s->lock);
}

static void *worker(void *arg) {
    struct dl_monitor_state *s = arg;
    struct dl_monitor_snapshots *m = &s->snap;
    pthread_mutex_lock(&s->lock);
    uint64_t ck_last = m->checkpoint_epoch, ex_last = m->export_epoch;
    pthread_mutex_unlock(&s->lock);
    uint64_t min_epoch = UINT64_MAX;
    if (m->checkpoint_dir) min_epoch = next_due(ck_last, m->checkpoint_every);
    if (m->export_dir && next_due(ex_last, m->export_every) < min_epoch) min_epoch = next_due(ex_last, m->export_every);

    dl_optimizer opt;
    bool opt_ok = dl_optimizer_init(&opt, &m->opt, &m->layout) == 0;
    float *params = opt_ok ? dl_malloc(dl_mul_size(m->layout.total, sizeof(float))) : NULL;
    struct dl_collab_swarm_state st;
    int rc = params ? dl_collab_fetch_swarm_state(m->net, min_epoch, m->fetch_timeout_s, &opt, params, &st) : -1;
    bool fetched = false;
    if (rc < 0) {
        record_failure(s, "downloading the swarm's state");
    } else if (rc == 0) {
        /* dl_state_fetch checked it already; checked again here because this
         * copy is what the files will hold. */
        uint8_t hash[32];
        dl_collab_param_hash(params, m->layout.total, hash);
        char hex[65];
        dl_collab_hash_hex(st.param_hash, hex);
        if (memcmp(hash, st.param_hash, 32)) {
            dl_fail("the downloaded weights do not match the signed param_hash %.16s", hex);
            record_failure(s, "downloading the swarm's state");
        } else {
            fetched = true;
            if (m->test_hold_s > 0) {
                /* Test builds: a download that takes long, so that a test can
                 * see HTTP answer while it is under way. */
                struct timespec ts = {(time_t)m->test_hold_s, 0};
                nanosleep(&ts, NULL);
            }
            DL_INFO("monitor", "downloaded the swarm's state of epoch %" PRIu64 " (param_hash %.16s, %zu holder%s) "
                    "in %.2f s", st.epoch, hex, st.holders, st.holders == 1 ? "" : "s", st.seconds);
            if (due(m->checkpoint_dir, m->checkpoint_every, ck_last, st.epoch)) save_checkpoint(s, &opt, params, &st, hex);
            if (due(m->export_dir, m->export_every, ex_last, st.epoch)) save_export(s, params, &st);
            pthread_mutex_lock(&s->lock);
            snprintf(m->param_hash, sizeof m->param_hash, "%s", hex);
            pthread_mutex_unlock(&s->lock);
        }
    }
    free(params);
    if (opt_ok) dl_optimizer_free(&opt);
#ifdef __GLIBC__
    /* The download's buffers (the state three times over, twice) go back to
     * the system now rather than staying in this thread's arena until the
     * next download: the monitor idles at its small size between them. */
    malloc_trim(0);
#endif
    pthread_mutex_lock(&s->lock);
    if (fetched) m->fetches++;
    /* After a failure or an empty look, the next try waits a little. */
    m->retry_at = dl_now() + (fetched ? 0 : rc > 0 ? 1 : 5);
    m->finished = true;
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

void dl_monitor_snapshots_tick(struct dl_monitor_state *s, uint64_t global_epoch) {
    struct dl_monitor_snapshots *m = &s->snap;
    if (!m->checkpoint_dir && !m->export_dir) return;
    pthread_mutex_lock(&s->lock);
    bool running = m->started && !m->finished, joinable = m->started && m->finished;
    bool wanted = due(m->checkpoint_dir, m->checkpoint_every, m->checkpoint_epoch, global_epoch) ||
                  due(m->export_dir, m->export_every, m->export_epoch, global_epoch);
    bool may = dl_now() >= m->retry_at;
    pthread_mutex_unlock(&s->lock);
    if (running) return;
    if (joinable) {
        pthread_join(m->thread, NULL);
        m->started = false;
    }
    if (!wanted || !may) return;
    m->finished = false;
    if (pthread_create(&m->thread, NULL, worker, s)) {
        dl_fail("cannot start a thread to download the swarm's state (out of resources?)");
        record_failure(s, "checkpoint");
        m->retry_at = dl_now() + 5;
        return;
    }
    m->started = true;
}

void dl_monitor_snapshots_stop(struct dl_monitor_state *s) {
    struct dl_monitor_snapshots *m = &s->snap;
    if (m->started) {
        pthread_mutex_lock(&s->lock);
        bool running = !m->finished;
        pthread_mutex_unlock(&s->lock);
        if (running) DL_INFO("monitor", "waiting for the state download under way to end");
        pthread_join(m->thread, NULL);
        m->started = false;
    }
    free(m->config_json);
    cJSON_free(m->run_json);
    dl_train_layout_free(&m->layout);
    dl_param_layout_free(&m->model_layout);
    m->config_json = m->run_json = NULL;
}
