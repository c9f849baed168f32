/* Local sources: text and JSON-lines files, gzip (with a corrupt member),
 * shard directories, over-long lines, and the sentence splitter. */
#include "data_test_util.h"
#include "dl_test.h"

static void test_sentences(void) {
    const char *text = "আমি ভাত খাই। তুমি কি খাও?  Yes. The value is 3.14 today!\n"
                       "Second line without end॥ তারপর... আর না।।";
    dl_span *s;
    size_t n;
    CHECK_OK(dl_split_sentences(text, strlen(text), &s, &n));
    const char *expect[] = {"আমি ভাত খাই।", "তুমি কি খাও?", "Yes.", "The value is 3.14 today!",
                            "Second line without end॥", "তারপর...", "আর না।।"};
    CHECK(n == sizeof expect / sizeof *expect);
    for (size_t i = 0; i < n && i < sizeof expect / sizeof *expect; i++)
        CHECK_MSG(s[i].len == strlen(expect[i]) && !memcmp(text + s[i].start, expect[i], s[i].len),
                  "sentence %zu is '%.*s'", i, (int)s[i].len, text + s[i].start);
    free(s);
    CHECK_OK(dl_split_sentences("   \n \n", 6, &s, &n));
    CHECK(n == 0);
    free(s);
}

static void test_text_file(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/plain.txt", dir);
    const char *content = "first doc\r\n\n  \nsecond doc\nthird doc without newline";
    write_bytes(path, content, strlen(content), "wb");
    dl_data_stats st = {0};
    char *all = read_all_documents(path, DL_DATA_AUTO, &st, NULL);
    CHECK(all && !strcmp(all, "first doc\nsecond doc\nthird doc without newline\n"));
    CHECK(st.bytes == strlen(content));
    CHECK(st.shards == 1);
    free(all);
}

static void test_paragraphs(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/paragraphs.txt", dir);
    const char *content = "first line\nsecond line\n\n\nthird\n \t\nfourth";
    write_bytes(path, content, strlen(content), "wb");
    dl_data_stats st = {0};
    char *all = read_all_documents(path, DL_DATA_PARAGRAPHS, &st, NULL);
    CHECK_MSG(all && !strcmp(all, "first line\nsecond line\n\nthird\n\nfourth\n\n"), "got '%s'", all);
    free(all);
    /* Without blank lines a document is cut at max_line bytes. */
    dl_data_io io = {.timeout_s = 5, .max_retries = 3, .retry_base_s = 0.01, .retry_max_s = 0.05,
                     .counters = &st};
    char **shards;
    size_t count;
    CHECK_OK(dl_data_list_shards(path, &io, &shards, &count));
    dl_docreader *dr;
    write_bytes(path, "aaaa\nbbbb\ncccc\ndddd\nee\n", 23, "wb");
    CHECK_OK(dl_docreader_new(shards, count, 0, DL_DATA_PARAGRAPHS, "text", 10, &io, &dr));
    const char *doc;
    size_t n;
    CHECK(dl_docreader_next(dr, &doc, &n) == 1 && !strcmp(doc, "aaaa\nbbbb\n"));
    CHECK(dl_docreader_next(dr, &doc, &n) == 1 && !strcmp(doc, "cccc\ndddd\n"));
    CHECK(dl_docreader_next(dr, &doc, &n) == 1 && !strcmp(doc, "ee\n"));
    CHECK(dl_docreader_next(dr, &doc, &n) == 0);
    dl_docreader_free(dr);
    dl_data_free_shards(shards, count);
}

static void test_gzip(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/multi.txt.gz", dir);
    const char *m1 = "alpha one\nalpha two\n", *m2 = "beta one\nbeta two\n", *m3 = "gamma one\n";
    size_t l1, l2, l3;
    unsigned char *g1 = gzip_member(m1, strlen(m1), &l1), *g2 = gzip_member(m2, strlen(m2), &l2),
                  *g3 = gzip_member(m3, strlen(m3), &l3);
    /* Intact: three members read in turn. */
    write_bytes(path, g1, l1, "wb");
    write_bytes(path, g2, l2, "ab");
    write_bytes(path, g3, l3, "ab");
    dl_data_stats st = {0};
    char *all = read_all_documents(path, DL_DATA_AUTO, &st, NULL);
    CHECK(all && !strcmp(all, "alpha one\nalpha two\nbeta one\nbeta two\ngamma one\n"));
    CHECK(st.bad_gzip_members == 0);
    free(all);
    /* Middle member corrupt (first deflate byte: invalid block type). */
    unsigned char *bad = malloc(l2);
    memcpy(bad, g2, l2);
    bad[10] = 0xff;
    write_bytes(path, g1, l1, "wb");
    write_bytes(path, bad, l2, "ab");
    write_bytes(path, g3, l3, "ab");
    memset(&st, 0, sizeof st);
    all = read_all_documents(path, DL_DATA_AUTO, &st, NULL);
    CHECK_MSG(all && !strcmp(all, "alpha one\nalpha two\ngamma one\n"), "got '%s'", all);
    CHECK(st.bad_gzip_members == 1);
    free(all);
    /* Corrupt CRC in the last member: counted, the earlier members stay. */
    memcpy(bad, g2, l2);
    bad[l2 - 8] ^= 0x55;
    write_bytes(path, g1, l1, "wb");
    write_bytes(path, bad, l2, "ab");
    memset(&st, 0, sizeof st);
    all = read_all_documents(path, DL_DATA_AUTO, &st, NULL);
    CHECK(all && !strncmp(all, "alpha one\nalpha two\n", 20));
    CHECK(st.bad_gzip_members == 1);
    free(all);
    /* Truncated file: the cut member counts, its partial line is dropped. */
    write_bytes(path, g1, l1, "wb");
    write_bytes(path, g3, l3 / 2, "ab");
    memset(&st, 0, sizeof st);
    all = read_all_documents(path, DL_DATA_AUTO, &st, NULL);
    CHECK_MSG(all && !strcmp(all, "alpha one\nalpha two\n"), "got '%s'", all);
    CHECK(st.bad_gzip_members == 1);
    free(all);
    free(bad);
    free(g1);
    free(g2);
    free(g3);
}

static void test_jsonl(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/docs.jsonl", dir);
    const char *content = "{\"text\": \"one document\", \"id\": 1}\n"
                          "{\"text\": 42}\n"
                          "not json at all\n"
                          "{\"body\": \"wrong field\"}\n"
                          "[\"an array\"]\n"
                          "{\"text\": \"line with \\u09e4 escape\\nand a newline\"}\n"
                          "{\"text\": \"truncated\n"
                          "{\"text\": \"last\"}";
    write_bytes(path, content, strlen(content), "wb");
    dl_data_stats st = {0};
    char *all = read_all_documents(path, DL_DATA_AUTO, &st, NULL);
    CHECK_MSG(all && !strcmp(all, "one document\nline with \xe0\xa7\xa4 escape\nand a newline\nlast\n"),
              "got '%s'", all);
    CHECK(st.skipped_lines == 5);
    free(all);
    /* The same bytes gzip-compressed, name .jsonl.gz */
    snprintf(path, sizeof path, "%s/docs.jsonl.gz", dir);
    size_t gl;
    unsigned char *g = gzip_member(content, strlen(content), &gl);
    write_bytes(path, g, gl, "wb");
    free(g);
    memset(&st, 0, sizeof st);
    all = read_all_documents(path, DL_DATA_AUTO, &st, NULL);
    CHECK(all && strstr(all, "one document\n") && strstr(all, "last\n"));
    CHECK(st.skipped_lines == 5);
    free(all);
    /* Forced text format: every line is a document. */
    memset(&st, 0, sizeof st);
    all = read_all_documents(path, DL_DATA_TEXT, &st, NULL);
    CHECK(all && strstr(all, "not json at all\n"));
    CHECK(st.skipped_lines == 0);
    free(all);
}

static void test_directory(const char *parent) {
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "%s/shards", parent);
    dl_mkdirs(dir);
    const char *names[] = {"b.txt", "a.txt", "c.txt.gz", ".hidden", "index.txt"};
    const char *bodies[] = {"doc b\n", "doc a\n", NULL, "hidden\n", "a.txt\n"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (bodies[i]) {
            write_bytes(path, bodies[i], strlen(bodies[i]), "wb");
        } else {
            size_t gl;
            unsigned char *g = gzip_member("doc c\n", 6, &gl);
            write_bytes(path, g, gl, "wb");
            free(g);
        }
    }
    snprintf(path, sizeof path, "%s/subdir", dir);
    dl_mkdirs(path);
    char **shards;
    size_t count;
    CHECK_OK(dl_data_list_shards(dir, NULL, &shards, &count));
    CHECK(count == 3);
    if (count == 3) {
        CHECK(strstr(shards[0], "/a.txt") && strstr(shards[1], "/b.txt") &&
              strstr(shards[2], "/c.txt.gz"));
        /* A peer starting at shard 1 reads b, c, then wraps to a. */
        dl_docreader *dr;
        CHECK_OK(dl_docreader_new(shards, count, 1, DL_DATA_AUTO, "text", 1024, NULL, &dr));
        const char *doc;
        size_t n;
        const char *order[] = {"doc b", "doc c", "doc a"};
        for (int i = 0; i < 3; i++) {
            CHECK(dl_docreader_next(dr, &doc, &n) == 1 && n == 5 && !memcmp(doc, order[i], 5));
        }
        CHECK(dl_docreader_next(dr, &doc, &n) == 0); /* end of the pass */
        CHECK(dl_docreader_next(dr, &doc, &n) == 1 && !memcmp(doc, "doc b", 5)); /* next pass */
        dl_docreader_free(dr);
    }
    dl_data_free_shards(shards, count);
    CHECK(dl_data_list_shards("/nonexistent/dedloc", NULL, &shards, &count) == -1);
    /* a URL to one file is one shard, without asking the server */
    CHECK(dl_data_list_shards("https://example.org/x", NULL, &shards, &count) == 0 && count == 1 &&
          !strcmp(shards[0], "https://example.org/x"));
    dl_data_free_shards(shards, count);
    CHECK(dl_data_list_shards("ftp://example.org/x", NULL, &shards, &count) == -1);
}

static void test_long_lines(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/long.txt", dir);
    size_t big = 300000;
    char *content = malloc(big + 64);
    size_t len = 0;
    len += (size_t)sprintf(content + len, "short one\n");
    memset(content + len, 'x', big);
    len += big;
    len += (size_t)sprintf(content + len, "\nshort two\n");
    write_bytes(path, content, len, "wb");
    free(content);
    dl_data_stats st = {0};
    dl_data_io io = {.timeout_s = 5, .max_retries = 3, .retry_base_s = 0.01, .retry_max_s = 0.05,
                     .counters = &st};
    char **shards;
    size_t count;
    CHECK_OK(dl_data_list_shards(path, &io, &shards, &count));
    dl_docreader *dr;
    CHECK_OK(dl_docreader_new(shards, count, 0, DL_DATA_TEXT, "text", 1000, &io, &dr));
    const char *doc;
    size_t n;
    CHECK(dl_docreader_next(dr, &doc, &n) == 1 && !strcmp(doc, "short one"));
    CHECK(dl_docreader_next(dr, &doc, &n) == 1 && !strcmp(doc, "short two"));
    CHECK(dl_docreader_next(dr, &doc, &n) == 0);
    CHECK(st.skipped_lines == 1);
    dl_docreader_free(dr);
    dl_data_free_shards(shards, count);
}

int main(void) {
    dl_log_set_level(DL_LOG_ERROR);
    char *dir = test_tmpdir();
    CHECK(dir != NULL);
    test_sentences();
    test_text_file(dir);
    test_gzip(dir);
    test_paragraphs(dir);
    test_jsonl(dir);
    test_directory(dir);
    test_long_lines(dir);
    rm_rf(dir);
    return dl_test_finish("test_data_sources");
}
