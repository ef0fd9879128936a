/*
 The device engine's gradient shards to the host, unit by unit (grads_host: stage 3 with
 the parameters offloaded): a ring of pinned slots filled on the copy-out stream, each added
 into the host's fp32 accumulators (h_grads) by the host, in the order they were sent.
 Included by zero3/device.cuh inside the engine, where it stood before: it reads ZeroDev.
*/
#ifndef ZERO3_DEVICE_SLOTS_CUH
#define ZERO3_DEVICE_SLOTS_CUH

// the oldest slot's shard, arrived, into unit u's accumulator (or the swap file's): the
// step's first add starts from zero (0 + g, as the GPU's zeroed accumulators do); on the
// last micro-step the sum's squares go to the step's norm (in double, unit by unit, as the
// swap file's do)
static int zero_dev_slot_add(ZeroDev* d) {
    ZeroDevSlot* sl = &d->slots[d->slot_head];
    const ZeroUnit* pu = &d->plan.units[sl->unit];
    int bf16 = sl->x && sizeof(floatX) == 2;  // bf16 bits, widened as they are added
    int rc = 0;
    if (d->opt_nvme) {  // into the swap file's gradient region (which keeps the squares itself),
        // once --dpu's update of the step before, which streams the same file, is over
        rc = zero_dev_update_join(d);
        if (rc == 0) { rc = zero_swap_grad_add(&d->swap, sl->unit, sl->host, bf16, sl->last_micro); }
    } else {
        float* acc = (float*)d->h_grads + pu->shard_offset;
        cpu_adam_grad_add(acc, sl->host, bf16, pu->shard, !d->acc_started[sl->unit]);
        d->acc_started[sl->unit] = 1;
        if (sl->last_micro) { d->grad_sumsq += grad_norm_squared(acc, pu->shard); }
    }
    d->slot_head = (d->slot_head + 1) % ZERO_DEV_SLOTS;
    d->slot_count--;
    return rc;
}

// adds the shards that have arrived (the mover's poll: at every release), without waiting
static int zero_dev_slots_poll(void* be) {
    ZeroDev* d = (ZeroDev*)be;
    while (d->slot_count > 0) {
        cudaError_t q = cudaEventQuery(d->slots[d->slot_head].done);
        if (q == cudaErrorNotReady) { (void)cudaGetLastError(); return 0; }  // (the runtime keeps it as its last error)
        if (zero_cuda(q, "cudaEventQuery") != 0 || zero_dev_slot_add(d) != 0) { return -1; }
    }
    return 0;
}

// waits for the oldest slot's copy and adds it (a watched wait: a failed collective before it ends it)
static int zero_dev_slot_drain_one(ZeroDev* d) {
    double w0 = zero_now_ms();
    if (zero_gpu_wait(NULL, d->slots[d->slot_head].done, "waiting for a gradient shard's copy") != 0) { return -1; }
    d->host_wait_ms += zero_now_ms() - w0;
    return zero_dev_slot_add(d);
}

// every shard sent is added (the step's start)
static int zero_dev_slots_drain(ZeroDev* d) {
    while (d->slot_count > 0) {
        if (zero_dev_slot_drain_one(d) != 0) { return -1; }
    }
    return 0;
}

// unit u's reduced shard (red: fp32, or floatX when x), just issued on the NCCL stream, to
// a slot on copy_out; the gradient buffer b is free once the copy has read it
static int zero_dev_send_shard(ZeroDev* d, int u, ZeroDevBuf* b, const void* red, int x) {
    if (d->slot_count == ZERO_DEV_SLOTS && zero_dev_slot_drain_one(d) != 0) { return -1; }
    ZeroDevSlot* sl = &d->slots[(d->slot_head + d->slot_count) % ZERO_DEV_SLOTS];
    size_t bytes = d->plan.units[u].shard * (x ? sizeof(floatX) : sizeof(float));
    int span = -1;
    if (zero_cuda(cudaEventRecord(d->reduced_out_ev, d->nccl.stream), "cudaEventRecord") != 0 ||
        zero_cuda(cudaStreamWaitEvent(d->copy_out, d->reduced_out_ev, 0), "cudaStreamWaitEvent") != 0 ||
        zero_trace_open(&d->trace, d->copy_out, &span) != 0 ||
        zero_cuda(cudaMemcpyAsync(sl->host, red, bytes, cudaMemcpyDeviceToHost, d->copy_out), "copying a gradient shard out") != 0 ||
        zero_trace_close(&d->trace, span, d->copy_out, "copy out", u, ZERO_TRACK_COPIES) != 0 ||
        zero_cuda(cudaEventRecord(sl->done, d->copy_out), "cudaEventRecord") != 0 ||
        zero_cuda(cudaEventRecord(b->free_ev, d->copy_out), "cudaEventRecord") != 0) {
        return -1;
    }
    sl->unit = u;
    sl->last_micro = d->sched.last_micro;
    sl->x = x;
    d->slot_count++;
    d->moved_d2h += (double)bytes;
    return 0;
}

#endif // ZERO3_DEVICE_SLOTS_CUH
