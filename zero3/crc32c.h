/*
 CRC32C (Castagnoli, the polynomial 0x82F63B78 reflected, as in iSCSI, ext4 and
 Btrfs): the checksum of every checkpoint file (llmc/checkpoint.h) and of every 4 KiB
 block of an NVMe swap file (zero3/nvme.h). The engine's, so that zero3/ (which includes
 nothing of llmc/) and the trainer's checkpoints share one implementation.

 Why CRC32C: it detects every burst error up to 32 bits and every odd number of flipped
 bits, and x86-64 computes it in hardware (SSE4.2's crc32 instruction: 8 bytes a cycle
 when independent chains keep it busy, its latency is 3 cycles), so checking a
 multi-gigabyte state file costs about as much as reading it. crc32c_blocks computes
 the checksums of four blocks side by side, four independent chains (eight were slower:
 the registers spill): on the development machine, 4 KiB blocks, 23.8 GB/s against 9.2
 one block at a time with the data in cache, 10.7 against 5.7 from memory.
 Debian 12 packages no CRC32C library for C, so it is computed here: with the instruction
 where the processor has it (checked at run time, so a build with -march=native and a
 portable one agree), else with a table, byte by byte. Both give the same value; the
 test suite checks the standard check value crc32c("123456789") = 0xE3069283.
*/
#ifndef ZERO3_CRC32C_H
#define ZERO3_CRC32C_H

#include <stddef.h>   // size_t
#include <stdint.h>   // uint32_t, uint64_t

#ifdef __cplusplus
extern "C" {
#endif

// Continues a checksum over n more bytes: start with crc32c_update(0, ...), feed each
// piece in order; the result is the CRC32C of all the bytes together.
uint32_t crc32c_update(uint32_t crc, const void* data, size_t n);

// The same by table, one byte at a time, on the inverted register (crc32c_update(c, p, n) =
// ~crc32c_soft(~c, p, n)): what crc32c_update falls back to without SSE4.2; the tests hold
// the instruction's result against it
uint32_t crc32c_soft(uint32_t crc, const unsigned char* p, size_t n);

// The CRC32C of each of the n blocks of `block` bytes at data, into out[0..n): what
// crc32c_update(0, block i) gives, four at a time where the instruction is there
void crc32c_blocks(const void* data, size_t n, size_t block, uint32_t* out);

// The checksum and size of the regular file at path, read in 4 MiB pieces. Returns 0,
// or -1 with *why saying what went wrong (the caller names the file).
int crc32c_file(const char* path, uint32_t* crc, uint64_t* size, const char** why);

#ifdef __cplusplus
}
#endif

#endif // ZERO3_CRC32C_H
