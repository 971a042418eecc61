/*
 * packplan: best-fit decreasing and first-fit decreasing plans (see packplan.h).
 *
 * Both take the items in decreasing size through one counting sort (sizes
 * are 1..capacity), then place each in O(log capacity) (best fit) or
 * O(log bins) (first fit):
 *  - best fit keeps, per remaining capacity c, a stack of the bins left with
 *    exactly c (head[c], next[bin]) and a bitset of the capacities whose
 *    stack is not empty, hierarchical (64 bits per word, a word per bit one
 *    level up) so "the least c >= size with a bin" is a few word scans;
 *  - first fit keeps every bin's remaining capacity (bins not yet opened
 *    hold the whole capacity, so the first one that fits is the next new bin
 *    when no open one does) and a max-tree over blocks of 32 bins, so "the
 *    lowest bin with room" is a descent of the tree and a scan of one block.
 * Any-fit packings leave at most one bin half empty or emptier, so the
 * caller bounds the bins by 2 * total / capacity + 2.
 */
#include "packplan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 32
#define MAX_LEVELS 8

static int
ctz64(uint64_t x)
{
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll(x);
#else
    int k = 0;
    while (!(x & 1)) {
        x >>= 1;
        k++;
    }
    return k;
#endif
}

typedef struct {
    int levels;
    int64_t words[MAX_LEVELS];
    uint64_t *level[MAX_LEVELS];
} bitset;

static void
bitset_free(bitset *b)
{
    for (int l = 0; l < b->levels; l++)
        free(b->level[l]);
}

static int
bitset_init(bitset *b, int64_t nbits)
{
    int64_t count = nbits;
    memset(b, 0, sizeof(*b));
    do {
        int64_t words = (count + 63) / 64;
        if (b->levels == MAX_LEVELS)
            return -1;
        b->level[b->levels] = (uint64_t *)calloc((size_t)words, sizeof(uint64_t));
        if (b->level[b->levels] == NULL) {
            bitset_free(b);
            return -2;
        }
        b->words[b->levels++] = words;
        count = words;
    } while (count > 1);
    return 0;
}

static void
bitset_set(bitset *b, int64_t x)
{
    for (int l = 0; l < b->levels; l++) {
        int64_t w = x >> 6;
        uint64_t old = b->level[l][w];
        b->level[l][w] = old | ((uint64_t)1 << (x & 63));
        if (old)
            return;
        x = w;
    }
}

static void
bitset_clear(bitset *b, int64_t x)
{
    for (int l = 0; l < b->levels; l++) {
        int64_t w = x >> 6;
        b->level[l][w] &= ~((uint64_t)1 << (x & 63));
        if (b->level[l][w])
            return;
        x = w;
    }
}

/* the least set bit >= x, or -1 */
static int64_t
bitset_next(const bitset *b, int64_t x)
{
    int l = 0;
    for (;;) {
        if (l == b->levels)
            return -1;
        int64_t w = x >> 6;
        if (w >= b->words[l])
            return -1;
        uint64_t bits = b->level[l][w] & (~(uint64_t)0 << (x & 63));
        if (bits) {
            x = (w << 6) + ctz64(bits);
            break;
        }
        x = w + 1;
        l++;
    }
    while (l > 0) {
        l--;
        x = (x << 6) + ctz64(b->level[l][x]);
    }
    return x;
}

/* The items of size s are order[first[s] .. first[s-1]-1] (first[0] = n): sizes are never re-read. */
#define EACH_ITEM(capacity, first) \
    for (int64_t s = (capacity); s >= 1; s--) \
        for (int64_t i = (first)[s]; i < (first)[s - 1]; i++)

static int64_t
best_fit(const int64_t *first, int64_t capacity, int64_t max_bins, int32_t *bin_of, char *msg, size_t msg_len)
{
    int32_t *head = (int32_t *)malloc((size_t)(capacity + 1) * sizeof(int32_t));
    int32_t *next = (int32_t *)malloc((size_t)(max_bins > 0 ? max_bins : 1) * sizeof(int32_t));
    bitset free_caps;
    int64_t nbins = 0;
    int rc = bitset_init(&free_caps, capacity + 1);
    if (head == NULL || next == NULL || rc != 0) {
        free(head);
        free(next);
        if (rc == 0)
            bitset_free(&free_caps);
        return -2;
    }
    for (int64_t c = 0; c <= capacity; c++)
        head[c] = -1;
    EACH_ITEM(capacity, first) {
        int64_t rest, c = bitset_next(&free_caps, s);
        int32_t b;
        if (c < 0) {
            if (nbins >= max_bins) {
                snprintf(msg, msg_len, "more than the %lld bins allowed", (long long)max_bins);
                nbins = -1;
                goto done;
            }
            b = (int32_t)nbins++;
            rest = capacity - s;
        } else {
            b = head[c];
            head[c] = next[b];
            if (head[c] < 0)
                bitset_clear(&free_caps, c);
            rest = c - s;
        }
        if (rest > 0) {
            next[b] = head[rest];
            if (head[rest] < 0)
                bitset_set(&free_caps, rest);
            head[rest] = b;
        }
        bin_of[i] = b;
    }
done:
    free(head);
    free(next);
    bitset_free(&free_caps);
    return nbins;
}

/* bin b's remaining capacity went from `old` to rem[b]: its block's largest into the tree, and up
   while that changes (a block's scan only when its largest may have shrunk) */
static void
ff_update(int64_t *tree, int64_t leaves, const int64_t *rem, int64_t b, int64_t old)
{
    int64_t node = leaves + b / BLOCK, top = rem[b];
    if (top > tree[node]) {
        for (; node >= 1 && tree[node] < top; node >>= 1)
            tree[node] = top;
        return;
    }
    if (old < tree[node])
        return; /* another bin of the block holds its largest */
    top = -1;
    for (int64_t j = (b / BLOCK) * BLOCK; j < (b / BLOCK + 1) * BLOCK; j++)
        top = rem[j] > top ? rem[j] : top;
    tree[node] = top;
    for (node >>= 1; node >= 1; node >>= 1) {
        int64_t m = tree[2 * node] > tree[2 * node + 1] ? tree[2 * node] : tree[2 * node + 1];
        if (tree[node] == m)
            break;
        tree[node] = m;
    }
}

static int64_t
first_fit(const int64_t *first, int64_t capacity, int64_t max_bins, int32_t *bin_of, char *msg, size_t msg_len)
{
    int64_t blocks = (max_bins + BLOCK - 1) / BLOCK, leaves = 1, nbins = 0;
    while (leaves < blocks)
        leaves <<= 1;
    int64_t *rem = (int64_t *)malloc((size_t)(blocks > 0 ? blocks : 1) * BLOCK * sizeof(int64_t));
    int64_t *tree = (int64_t *)malloc((size_t)(2 * leaves) * sizeof(int64_t));
    if (rem == NULL || tree == NULL) {
        free(rem);
        free(tree);
        return -2;
    }
    /* -1: a bin not opened yet (the tree is over open bins only: an item no open bin takes opens the next) */
    for (int64_t b = 0; b < blocks * BLOCK; b++)
        rem[b] = -1;
    for (int64_t k = 0; k < 2 * leaves; k++)
        tree[k] = -1;
    EACH_ITEM(capacity, first) {
        int64_t b, old, node = 1;
        if (tree[1] < s) {
            if (nbins >= max_bins) {
                snprintf(msg, msg_len, "more than the %lld bins allowed", (long long)max_bins);
                nbins = -1;
                goto done;
            }
            b = nbins++;
            rem[b] = capacity; /* (was -1: the tree never saw it) */
        } else {
            while (node < leaves)
                node = tree[2 * node] >= s ? 2 * node : 2 * node + 1;
            for (b = (node - leaves) * BLOCK; rem[b] < s; b++)
                ;
        }
        old = rem[b];
        rem[b] -= s;
        bin_of[i] = (int32_t)b;
        ff_update(tree, leaves, rem, b, old);
    }
done:
    free(rem);
    free(tree);
    return nbins;
}

static uint64_t
mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* position k of the seeded shuffle of 0..n-1: a 4-round Feistel bijection of [0, 4**half)
   walked until it lands below n (4**half >= n) */
static int64_t
shuffled(uint64_t k, uint64_t n, int half, const uint64_t *keys)
{
    uint64_t mask = ((uint64_t)1 << half) - 1;
    do {
        uint64_t l = k >> half, r = k & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t t = l ^ (mix64(r ^ keys[round]) & mask);
            l = r;
            r = t;
        }
        k = (l << half) | r;
    } while (k >= n);
    return (int64_t)k;
}

int64_t
pack_plan(const int64_t *sizes, const int64_t *ids, const uint64_t *keys, int64_t n, int64_t capacity, int method,
          int64_t max_bins, int64_t *bin_offsets, int64_t *bin_items, char *msg, size_t msg_len)
{
    int64_t *count, *first, *order, nbins, pos = 0;
    int32_t *bin_of;
    int half = 1;

    if (capacity < 1 || max_bins < 0 || max_bins > INT32_MAX || n < 0) {
        snprintf(msg, msg_len, "capacity %lld or bins %lld out of range", (long long)capacity, (long long)max_bins);
        return -1;
    }
    for (int64_t k = 0; k < n; k++) {
        if (sizes[k] < 1 || sizes[k] > capacity) {
            snprintf(msg, msg_len, "item %lld has size %lld, outside 1..%lld", (long long)k, (long long)sizes[k],
                     (long long)capacity);
            return -1;
        }
    }
    count = (int64_t *)calloc((size_t)(capacity + 2), sizeof(int64_t));
    first = (int64_t *)malloc((size_t)(capacity + 2) * sizeof(int64_t));
    order = (int64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    bin_of = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (count == NULL || first == NULL || order == NULL || bin_of == NULL) {
        free(count);
        free(first);
        free(order);
        free(bin_of);
        return -2;
    }
    while (half < 31 && ((int64_t)1 << (2 * half)) < n)
        half++;
    /* a stable counting sort of the shuffled items, largest size first: the shuffle goes through
       order and the shuffled sizes through bin_of (as int32: sizes <= 2**30) */
    for (int64_t k = 0; k < n; k++) {
        int64_t item = keys != NULL ? shuffled((uint64_t)k, (uint64_t)n, half, keys) : k;
        int32_t sk = (int32_t)sizes[item];
        order[k] = item;
        bin_of[k] = sk;
        count[sk]++;
    }
    first[0] = n;
    for (int64_t s = capacity; s >= 1; s--) {
        first[s] = pos;
        pos += count[s];
        count[s] = first[s];
    }
    for (int64_t k = 0; k < n; k++)
        bin_items[count[bin_of[k]]++] = order[k]; /* (bin_items: scratch until the plan is written) */
    memcpy(order, bin_items, (size_t)n * sizeof(int64_t));
    free(count);

    if (method == PACK_BEST_FIT)
        nbins = best_fit(first, capacity, max_bins, bin_of, msg, msg_len);
    else
        nbins = first_fit(first, capacity, max_bins, bin_of, msg, msg_len);
    free(first);
    if (nbins >= 0) {
        /* CSR: count per bin, exclusive prefix sums as cursors, then shift back */
        memset(bin_offsets, 0, (size_t)(nbins + 1) * sizeof(int64_t));
        for (int64_t i = 0; i < n; i++)
            bin_offsets[bin_of[i]]++;
        pos = 0;
        for (int64_t b = 0; b < nbins; b++) {
            int64_t c = bin_offsets[b];
            bin_offsets[b] = pos;
            pos += c;
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t k = order[i];
            bin_items[bin_offsets[bin_of[i]]++] = ids != NULL ? ids[k] : k;
        }
        memmove(bin_offsets + 1, bin_offsets, (size_t)nbins * sizeof(int64_t));
        bin_offsets[0] = 0;
    }
    free(order);
    free(bin_of);
    return nbins;
}
