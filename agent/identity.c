/*
 * identity.c - reading the launcher's environment and /proc/self/stat.
 */
#include "identity.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procstat.h"

static const char *const identity_job_vars[] = {
	"NPUSAN_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", NULL
};
static const char *const identity_run_vars[] = { "NPUSAN_RUN", NULL };
static const char *const identity_rank_vars[] = {
	"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", NULL
};
static const char *const identity_local_rank_vars[] = {
	"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", NULL
};
static const char *const identity_world_size_vars[] = {
	"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", NULL
};

/* The first of `names` set to a non-empty value, or NULL. */
static const char *identity_env_first(const char *const *names)
{
	for (; *names != NULL; names++) {
		const char *v = getenv(*names);

		if (v != NULL && v[0] != '\0')
			return v;
	}
	return NULL;
}

static bool identity_env_u32(const char *const *names, uint32_t *out)
{
	const char *v = identity_env_first(names);
	unsigned long long n;
	char *end;

	if (v == NULL || v[0] < '0' || v[0] > '9')
		return false;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (*end != '\0' || errno != 0 || n > UINT32_MAX)
		return false;
	*out = (uint32_t)n;
	return true;
}

void identity_from_env(struct identity *id)
{
	memset(id, 0, sizeof(*id));
	id->job = identity_env_first(identity_job_vars);
	id->run = identity_env_first(identity_run_vars);
	id->has_rank = identity_env_u32(identity_rank_vars, &id->rank);
	id->has_local_rank = identity_env_u32(identity_local_rank_vars,
					      &id->local_rank);
	id->has_world_size = identity_env_u32(identity_world_size_vars,
					      &id->world_size);
}

int identity_start_time(uint64_t *out)
{
	return procstat_start_time(getpid(), out);
}
