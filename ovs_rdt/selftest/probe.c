/*
 * ovsrdt-probe: the memory probe of "ovs-rdt selftest" (its effect part).
 *
 * Built for each run by ovs_rdt/selftest/probe.py with the system's cc.
 * C, not Python: a dependent pointer chase must cost one memory access a
 * step, and an interpreter adds tens of nanoseconds to each.
 *
 *   ovsrdt-probe chase CPU BYTES    pointer chase over BYTES
 *   ovsrdt-probe stream CPU BYTES   the streaming neighbour
 *
 * Both pin themselves to CPU, die with their parent (PR_SET_PDEATHSIG),
 * print "ready" and then take commands on standard input, one a line, so
 * that the selftest can move them into a resctrl group first:
 *
 *   chase:  "init"       allocate and fill the working set: a random cyclic
 *                        permutation of every other cache line of it, each
 *                        holding the address of the next (no prefetcher can
 *                        guess it);
 *                        answers "ok"
 *           "measure S"  walk it once to warm up, then for S seconds;
 *                        answers "ns <per access> <accesses>" and keeps
 *                        walking (its lines stay hot) until the next line
 *   stream: "go"         read and write every line of BYTES, over and over
 *
 * End of input ends either.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define LINE 64
/*
 * The chase's step: one line in two, so that the adjacent-line prefetcher
 * (which fetches the other line of a 128-byte pair) never brings the next
 * step for free.
 */
#define STEP 128
#define BATCH 4096

static void *volatile sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static char *alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	madvise(p, bytes, MADV_HUGEPAGE);	/* fewer TLB misses, if it can */
	return p;
}

/* Input waiting (or closed) on standard input? */
static int input_ready(void)
{
	struct pollfd fd = { .fd = 0, .events = POLLIN };

	return poll(&fd, 1, 0) != 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_random(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Sattolo's shuffle: one cycle through every step. */
static void **build(size_t bytes)
{
	size_t n = bytes / STEP, i, j, t;
	char *buf = alloc(n * STEP);
	size_t *next = malloc(n * sizeof(*next));

	if (!next)
		die("malloc");
	for (i = 0; i < n; i++)
		next[i] = i;
	for (i = n - 1; i > 0; i--) {
		j = next_random() % i;
		t = next[i];
		next[i] = next[j];
		next[j] = t;
	}
	for (i = 0; i < n; i++)
		*(void **)(buf + i * STEP) = buf + next[i] * STEP;
	free(next);
	return (void **)buf;
}

static void **walk(void **p, uint64_t steps)
{
	while (steps--)
		p = (void **)*p;
	return p;
}

static int chase(size_t bytes)
{
	char line[128];
	void **p = NULL;
	size_t n = bytes / STEP;

	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "init", 4)) {
			p = build(bytes);
			printf("ok\n");
		} else if (!strncmp(line, "measure", 7) && p) {
			double secs = atof(line + 7), start, took;
			uint64_t count = 0;

			p = walk(p, n);
			start = now();
			do {
				p = walk(p, BATCH);
				count += BATCH;
				took = now() - start;
			} while (took < secs);
			printf("ns %.3f %llu\n", took * 1e9 / count,
			       (unsigned long long)count);
			fflush(stdout);
			while (!input_ready())
				p = walk(p, BATCH * 16);
			sink = p;
			continue;
		} else {
			printf("error: unknown command %s", line);
		}
		fflush(stdout);
	}
	return 0;
}

static int stream(size_t bytes)
{
	char line[128];
	volatile char *buf;
	size_t i;

	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2))
		return 0;
	buf = (volatile char *)alloc(bytes);
	for (;;) {
		for (i = 0; i < bytes; i += LINE)
			buf[i]++;
		if (input_ready())
			return 0;
	}
}

int main(int argc, char **argv)
{
	cpu_set_t cpus;
	pid_t parent = getppid();
	size_t bytes;

	if (argc != 4) {
		fprintf(stderr, "usage: %s chase|stream CPU BYTES\n", argv[0]);
		return 2;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		return 1;
	prctl(PR_SET_NAME, strcmp(argv[1], "chase") ? "ovsrdt-stream" : "ovsrdt-probe");
	CPU_ZERO(&cpus);
	CPU_SET(atoi(argv[2]), &cpus);
	if (sched_setaffinity(0, sizeof(cpus), &cpus))
		die("sched_setaffinity");
	bytes = strtoull(argv[3], NULL, 10) / STEP * STEP;
	if (bytes < 2 * STEP) {
		fprintf(stderr, "too few bytes: %s\n", argv[3]);
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	if (!strcmp(argv[1], "chase"))
		return chase(bytes);
	return stream(bytes);
}
