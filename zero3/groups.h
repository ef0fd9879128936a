/*
 The ranks' groups, built once for both engines: the host engine wraps them in ZeroComm
 (zero3/comm.h), the device engine in NCCL communicators (zero3/nccl.cuh).

   shard group  the ranks the model states are sharded over: all of them, or with MiCS
                (mics_shard_size S) groups of S consecutive ranks
   replicas     the ranks holding the same shards in the other groups (the same index in
                every shard group): MiCS reduces its gradients across them
   hpZ groups   consecutive ranks of the shard group (zero_hpz_partition_size P): a
                unit's later gathers in a step stay inside them
 Each rank also learns its node (zero_comm_node: --ranks-per-node, else the host name) and
 where the whole job's ranks are, for the report. Every MPI call's result is checked.
*/
#ifndef ZERO3_GROUPS_H
#define ZERO3_GROUPS_H

#include <mpi.h>            // MPI_Comm, MPI_Comm_split
typedef struct ZeroConfig ZeroConfig;  // zero_groups_split's (zero3/config.h)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    MPI_Comm shard;       // the shard group
    MPI_Comm reps;        // the replicas (one rank each without MiCS)
    MPI_Comm hpz;         // this rank's hpZ group (one rank each without hpZ)
    int rank, world;      // this rank's index in the shard group, and its size
    int mics, hpz_on;     // MiCS splits the world (S < ranks); hpZ splits the shard group (P > 1)
    int node;             // this rank's node
    int nodes, per_node;  // the job's nodes and ranks on each (per_node 0: uneven)
    int dp_world;         // every data-parallel rank: the mean gradient's divisor
} ZeroGroups;

// Splits world into the groups of cfg (a collective over world). A size that does not
// divide its group is refused, naming it. On failure nothing is left to free.
int zero_groups_split(MPI_Comm world, const ZeroConfig* cfg, ZeroGroups* g);

// frees the communicators (the engines keep their own duplicates or NCCL communicators)
void zero_groups_free(ZeroGroups* g);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_GROUPS_H
