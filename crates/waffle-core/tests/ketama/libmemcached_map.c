/*
 * The reference for Waffle's ketama: which node libmemcached picks for each key.
 *
 *   libmemcached_map HOST:PORT:WEIGHT[,HOST:PORT:WEIGHT...] < keys > indexes
 *
 * Reads one key per line on stdin and prints, per key, the index of the node
 * (in the order given) that memcached_generate_hash() returns, with weighted
 * ketama and the MD5 key hash. Nothing is resolved or connected.
 * Build: cc libmemcached_map.c -o libmemcached_map -lmemcached
 */
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what, memcached_st *memc, memcached_return_t rc) {
    fprintf(stderr, "libmemcached_map: %s: %s\n", what, memc ? memcached_strerror(memc, rc) : "");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s HOST:PORT:WEIGHT[,...] < keys\n", argv[0]);
        return 2;
    }
    memcached_st *memc = memcached_create(NULL);
    if (!memc) die("memcached_create", NULL, MEMCACHED_FAILURE);

    /* Order matters: setting DISTRIBUTION=CONSISTENT_KETAMA turns weighting off;
     * KETAMA_WEIGHTED=1 then turns it on, sets the MD5 key hash, and switches the
     * distribution to CONSISTENT_WEIGHTED (the same continuum code). */
    memcached_return_t rc =
        memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_DISTRIBUTION, MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA);
    if (rc != MEMCACHED_SUCCESS) die("DISTRIBUTION", memc, rc);
    rc = memcached_behavior_set(memc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1);
    if (rc != MEMCACHED_SUCCESS) die("KETAMA_WEIGHTED", memc, rc);

    char *list = strdup(argv[1]);
    for (char *item = strtok(list, ","); item; item = strtok(NULL, ",")) {
        char *port_text = strchr(item, ':');
        if (!port_text) die("node without port", NULL, MEMCACHED_FAILURE);
        *port_text++ = '\0';
        char *weight_text = strchr(port_text, ':');
        unsigned weight = 1;
        if (weight_text) {
            *weight_text++ = '\0';
            weight = (unsigned) strtoul(weight_text, NULL, 10);
        }
        rc = memcached_server_add_with_weight(memc, item, (in_port_t) strtoul(port_text, NULL, 10), weight);
        if (rc != MEMCACHED_SUCCESS) die("memcached_server_add_with_weight", memc, rc);
    }
    free(list);

    if (memcached_behavior_get(memc, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED) != 1)
        die("weighted ketama is not on", memc, MEMCACHED_FAILURE);
    if (memcached_behavior_get(memc, MEMCACHED_BEHAVIOR_HASH) != MEMCACHED_HASH_MD5)
        die("the key hash is not MD5", memc, MEMCACHED_FAILURE);

    char line[1024];
    while (fgets(line, sizeof line, stdin)) {
        size_t len = strcspn(line, "\r\n");
        printf("%u\n", memcached_generate_hash(memc, line, len));
    }
    memcached_free(memc);
    return ferror(stdout) ? 1 : 0;
}
