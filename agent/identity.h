/*
 * identity.h - who this process is, as the daemon and a recorded trace name
 * it: job, rank, local rank and world size from the launcher's environment
 * (torchrun, Slurm, Open MPI), and the process's start time.
 *
 * Read once at start-up: getenv() races with a concurrent setenv().
 * Strings point into the environment; nothing here is allocated.
 */
#ifndef NPUSAN_AGENT_IDENTITY_H
#define NPUSAN_AGENT_IDENTITY_H

#include <stdbool.h>
#include <stdint.h>

struct identity {
	const char *job; /* NULL when no launcher named one */
	const char *run; /* NPUSAN_RUN: the run of the job; NULL if none */
	bool has_rank;
	bool has_local_rank;
	bool has_world_size;
	uint32_t rank;
	uint32_t local_rank;
	uint32_t world_size;
};

/*
 * Fills *id: job from NPUSAN_JOB, else TORCHELASTIC_RUN_ID, else
 * SLURM_JOB_ID; run from NPUSAN_RUN; rank from RANK, else SLURM_PROCID, else
 * OMPI_COMM_WORLD_RANK; local rank and world size likewise. The first
 * variable that is set decides; one that is not a decimal number below 2^32
 * leaves its field absent, since a wrong rank is worse than none.
 */
void identity_from_env(struct identity *id);

/* Field 22 of /proc/self/stat, clock ticks after boot: with the pid, it
 * tells a process from a later one that reuses its pid. 0 or -errno. */
int identity_start_time(uint64_t *out);

#endif
