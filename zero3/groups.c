// zero3/groups.c: the ranks' groups (the interface and its notes: zero3/groups.h)
#include <string.h>         // memset
#include "zero3/config.h"   // ZeroConfig: mics_shard_size, zero_hpz_partition_size, ranks_per_node
#include "zero3/util.h"     // zero_error
#include "zero3/comm.h"     // zero_comm_node, zero_comm_span, zero_comm_mpi_error
#include "zero3/groups.h"   // this module's types and prototypes

void zero_groups_free(ZeroGroups* g) {
    MPI_Comm* cs[3] = {&g->shard, &g->reps, &g->hpz};
    for (int i = 0; i < 3; i++) {
        if (*cs[i] != MPI_COMM_NULL) { MPI_Comm_free(cs[i]); }
        *cs[i] = MPI_COMM_NULL;
    }
}

int zero_groups_split(MPI_Comm world, const ZeroConfig* cfg, ZeroGroups* g) {
    int wrank = 0, wsize = 0, srank = 0, ssize = 0, rc;
    memset(g, 0, sizeof(*g));
    g->shard = g->reps = g->hpz = MPI_COMM_NULL;
    if ((rc = MPI_Comm_rank(world, &wrank)) != MPI_SUCCESS || (rc = MPI_Comm_size(world, &wsize)) != MPI_SUCCESS) {
        return zero_comm_mpi_error("the ranks' communicator", rc);
    }
    if (zero_comm_node(world, cfg->ranks_per_node, &g->node) != 0) { return -1; }
    ZeroSpan all;   // where the whole world's ranks are, for the report
    if (zero_comm_span(world, g->node, &all) != 0) { return -1; }
    g->nodes = all.nodes;
    g->per_node = all.span == ZERO_SPAN_UNEVEN ? 0 : all.per_node;
    g->dp_world = wsize;
    int S = cfg->mics_shard_size > 0 ? cfg->mics_shard_size : wsize;
    if (wsize % S != 0) { return zero_error("zero: mics_shard_size %d does not divide the %d ranks", S, wsize); }
    g->mics = S < wsize;
    if ((rc = MPI_Comm_split(world, wrank / S, wrank, &g->shard)) != MPI_SUCCESS ||
        (rc = MPI_Comm_split(world, wrank % S, wrank, &g->reps)) != MPI_SUCCESS ||
        (rc = MPI_Comm_rank(g->shard, &srank)) != MPI_SUCCESS || (rc = MPI_Comm_size(g->shard, &ssize)) != MPI_SUCCESS) {
        zero_groups_free(g);
        return zero_comm_mpi_error("MPI_Comm_split (the shard groups)", rc);
    }
    g->rank = srank;
    g->world = ssize;
    int P = cfg->hpz_partition_size > 1 ? cfg->hpz_partition_size : 1;
    if (P > ssize || ssize % P != 0) {
        zero_groups_free(g);
        return zero_error("zero: zero_hpz_partition_size %d does not divide the %d ranks", P, ssize);
    }
    g->hpz_on = P > 1;
    if ((rc = MPI_Comm_split(g->shard, srank / P, srank, &g->hpz)) != MPI_SUCCESS) {
        zero_groups_free(g);
        return zero_comm_mpi_error("MPI_Comm_split (the hpZ groups)", rc);
    }
    return 0;
}
