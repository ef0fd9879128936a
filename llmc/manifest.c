// The checkpoint manifest (llmc/manifest.h): its file, its checks, the ranks' agreement.
#include "llmc/manifest.h" // the interface, its types and the headers its bodies use
#include <stdio.h>            // snprintf, sscanf, fread
#include <fcntl.h>            // O_RDONLY: the marker opened through common/file.h
#include <stdlib.h>           // malloc, calloc, realloc, free
#include <string.h>           // strlen, strcmp, strtok, memset
#include <errno.h>            // errno: the messages; EEXIST, ENOENT
#include <dirent.h>           // opendir, readdir: the markers and a step's files
#include <sys/stat.h>         // lstat: a marker must be a regular file; mkdir: the damaged ones' directory
#include "llmc/utils.h"       // llmc_error, AtomicFile, fsync_parent_dir
#include "common/file.h"      // file_fopen, file_kind: the marker opened without blocking on a FIFO
#include "zero3/crc32c.h"     // crc32c_file, crc32c_update: the manifest's checksums
#include "zero3/plan.h"       // ZERO_PLAN_MAX_WORLD: the manifest's bound on ranks
#include "zero3/watchdog.h"   // zero_watch_io_enter/leave: the read-back of a file just written told to the watchdog
#include "zero3/watch.h"    // zero_watch_enter/leave, zero_watch_io_enter/leave: waits told to the watchdog

void checkpoint_manifest_free(CheckpointManifest* m) {
    free(m->files);
    memset(m, 0, sizeof(*m));
}

// the n decimal digits at s, exactly (no sign, no space), into *v; 1 when so
static int checkpoint_digits(const char* s, int n, int* v) {
    *v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') { return 0; }
        *v = *v * 10 + (s[i] - '0');
    }
    return 1;
}

int checkpoint_name_parse(const char* name, int* step, int* rank, int* tmp) {
    size_t len = strlen(name);
    *tmp = len > 4 && strcmp(name + len - 4, ".tmp") == 0;
    if (*tmp) { len -= 4; }
    *rank = -1;
    if (len == 13 && strncmp(name, "DONE_", 5) == 0 && checkpoint_digits(name + 5, 8, step)) { return CHECKPOINT_FILE_DONE; }
    if (len == 18 && strncmp(name, "model_", 6) == 0 && checkpoint_digits(name + 6, 8, step) &&
        strncmp(name + 14, ".bin", 4) == 0) {
        return CHECKPOINT_FILE_MODEL;
    }
    if (len == 24 && strncmp(name, "state_", 6) == 0 && checkpoint_digits(name + 6, 8, step) && name[14] == '_' &&
        checkpoint_digits(name + 15, 5, rank) && strncmp(name + 20, ".bin", 4) == 0) {
        return CHECKPOINT_FILE_STATE;
    }
    *rank = -1;
    return CHECKPOINT_FILE_NONE;
}

// file i of step's checkpoint, as the manifest lists them: 0 the model file, i the state
// file of rank i - 1
static void checkpoint_file_name(char* name, size_t n, int step, int i) {
    if (i == 0) { snprintf(name, n, "model_%08d.bin", step); }
    else { snprintf(name, n, "state_%08d_%05d.bin", step, i - 1); }
}

int checkpoint_steps(const char* dir, int** steps) {
    *steps = NULL;
    DIR* d = opendir(dir);
    if (d == NULL) { return 0; }
    int n = 0, cap = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int s, r, tmp;
        if (checkpoint_name_parse(e->d_name, &s, &r, &tmp) != CHECKPOINT_FILE_DONE || tmp) { continue; }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int* grown = (int*)realloc(*steps, cap * sizeof(int));
            if (grown == NULL) { break; }
            *steps = grown;
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++) {  // newest first (insertion sort: a run keeps few)
        int v = (*steps)[i], j = i - 1;
        for (; j >= 0 && (*steps)[j] < v; j--) { (*steps)[j + 1] = (*steps)[j]; }
        (*steps)[j + 1] = v;
    }
    return n;
}

// one "file NAME SIZE CRC32C" line, the nfiles-th of m (path: the marker, for the messages)
static int checkpoint_manifest_file_line(const char* path, const char* line, int line_no, CheckpointManifest* m) {
    ManifestFile f;
    unsigned long long size;
    unsigned c;
    int consumed = 0;
    char want[64];
    if (m->nfiles == m->world + 1) {
        return llmc_error("checkpoint manifest %s: more files than a world of %d ranks writes (line %d)", path, m->world, line_no);
    }
    checkpoint_file_name(want, sizeof(want), m->step, m->nfiles);
    if (sscanf(line, "file %63s %llu %8x%n", f.name, &size, &c, &consumed) != 3 || line[consumed] != '\0') {
        return llmc_error("checkpoint manifest %s: line %d is \"%.80s\", expected \"file NAME SIZE CRC32C\"", path, line_no, line);
    }
    if (strcmp(f.name, want) != 0) {  // the checkpoint's own files, in order: nothing else is read, or removed
        return llmc_error("checkpoint manifest %s: line %d names %.64s; file %d of the checkpoint is %s", path, line_no, f.name,
                          m->nfiles, want);
    }
    f.size = size;
    f.crc = c;
    m->files[m->nfiles++] = f;
    return 0;
}

// Parses the manifest text (len bytes, NUL-terminated; modified in place) of `path` into
// m, whose files the caller frees whatever the result. Returns 0, or -1 with llmc_errmsg()
// naming the marker and the first thing wrong.
static int checkpoint_manifest_parse(const char* path, char* text, size_t len, int step, CheckpointManifest* m) {
    if (strlen(text) != len) { return llmc_error("checkpoint manifest %s: a NUL byte at offset %zu", path, strlen(text)); }
    // the last line is "crc32c X" over every byte before it
    if (text[len - 1] != '\n') { return llmc_error("checkpoint manifest %s: truncated (no final newline)", path); }
    text[len - 1] = '\0';
    char* last = strrchr(text, '\n');
    unsigned crc_want;
    char extra;
    if (last == NULL || sscanf(last + 1, "crc32c %8x%c", &crc_want, &extra) != 1) {
        return llmc_error("checkpoint manifest %s: no checksum line at its end (truncated or not a manifest)", path);
    }
    uint32_t crc = crc32c_update(0, text, (size_t)(last + 1 - text));
    if (crc != crc_want) {
        return llmc_error("checkpoint manifest %s: checksum %08x, but its contents give %08x (the marker is damaged)", path,
                          crc_want, crc);
    }
    *last = '\0';
    int line_no = 0;
    for (char* line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        line_no++;
        int v, consumed = 0;
        if (line_no == 1) {
            if (sscanf(line, CHECKPOINT_MANIFEST_TITLE " %d%n", &v, &consumed) != 1 || line[consumed] != '\0' ||
                v != CHECKPOINT_MANIFEST_VERSION) {
                return llmc_error("checkpoint manifest %s: line 1 is \"%.80s\", expected \"%s %d\"", path, line,
                                  CHECKPOINT_MANIFEST_TITLE, CHECKPOINT_MANIFEST_VERSION);
            }
            m->version = v;
        } else if (line_no == 2) {
            if (sscanf(line, "step %d%n", &m->step, &consumed) != 1 || line[consumed] != '\0' || m->step != step) {
                return llmc_error("checkpoint manifest %s: line 2 is \"%.80s\", expected \"step %d\"", path, line, step);
            }
        } else if (line_no == 3) {
            if (sscanf(line, "world %d%n", &m->world, &consumed) != 1 || line[consumed] != '\0' || m->world < 1 ||
                m->world > ZERO_PLAN_MAX_WORLD) {
                return llmc_error("checkpoint manifest %s: line 3 is \"%.80s\", expected \"world N\" with N in [1, %d]", path,
                                  line, ZERO_PLAN_MAX_WORLD);
            }
            m->files = (ManifestFile*)calloc((size_t)m->world + 1, sizeof(ManifestFile));
            if (m->files == NULL) { return llmc_error("checkpoint manifest %s: out of memory", path); }
        } else if (checkpoint_manifest_file_line(path, line, line_no, m) != 0) {
            return -1;
        }
    }
    if (line_no < 3 || m->nfiles != m->world + 1) {
        return llmc_error("checkpoint manifest %s: lists %d files; a world of %d ranks writes %d", path, m->nfiles, m->world,
                          m->world + 1);
    }
    return 0;
}

int checkpoint_manifest_read(const char* dir, int step, int allow_unverified, CheckpointManifest* m) {
    memset(m, 0, sizeof(*m));
    char path[4096];
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
    struct stat st;
    if (lstat(path, &st) != 0) { return llmc_error("cannot read checkpoint manifest %s: %s", path, strerror(errno)); }
    if (!S_ISREG(st.st_mode)) {
        return llmc_error("checkpoint marker %s is %s, not a manifest: the checkpoint is not complete", path,
                          file_kind(st.st_mode));
    }
    const char* why = NULL;
    FILE* fp = file_fopen(path, O_RDONLY, 0, "rb", &why);  // a FIFO put there since the lstat is refused, not waited on
    if (fp == NULL) { return llmc_error("cannot read checkpoint manifest %s: %s", path, why); }
    enum { MAX_TEXT = 1 << 24 };  // 16 MiB: some 200k ranks' lines
    size_t cap = fstat(fileno(fp), &st) == 0 && st.st_size < MAX_TEXT ? (size_t)st.st_size : MAX_TEXT;
    char* text = (char*)malloc(cap + 2);
    size_t len = text != NULL ? fread(text, 1, cap + 1, fp) : 0;  // one more: a file grown meanwhile shows
    fclose(fp);
    if (text == NULL) { return llmc_error("checkpoint manifest %s: out of memory", path); }
    int rc = 0;
    if (len > cap) {
        rc = llmc_error("checkpoint manifest %s: larger than %zu bytes (at most %d)", path, cap, MAX_TEXT);
    } else if (len == 0 && allow_unverified) {
        m->step = step;  // taken for an earlier version's marker, as the user said
    } else if (len == 0) {
        rc = llmc_error("checkpoint marker %s is empty: it has no checksums to verify the checkpoint against (an earlier "
                        "version's marker, or one cut short); --allow-unverified accepts an earlier version's", path);
    } else {
        text[len] = '\0';
        rc = checkpoint_manifest_parse(path, text, len, step, m);
    }
    free(text);
    if (rc != 0) { checkpoint_manifest_free(m); }
    return rc;
}

int checkpoint_manifest_check(const char* dir, const CheckpointManifest* m, int first, int stride) {
    for (int i = first; i < m->nfiles; i += stride) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, m->files[i].name);
        uint32_t crc;
        uint64_t size;
        const char* why = NULL;
        if (crc32c_file(path, &crc, &size, &why) != 0) {
            return llmc_error("checkpoint at step %d: cannot read %s: %s", m->step, path, why);
        }
        if (size != m->files[i].size) {
            return llmc_error("checkpoint at step %d: %s has %llu bytes; its manifest says %llu (truncated or replaced)", m->step,
                              path, (unsigned long long)size, (unsigned long long)m->files[i].size);
        }
        if (crc != m->files[i].crc) {
            return llmc_error("checkpoint at step %d: %s fails its checksum (CRC32C %08x; its manifest says %08x): the file is "
                              "damaged", m->step, path, crc, m->files[i].crc);
        }
    }
    return 0;
}

int checkpoint_verify(const char* dir, int step, int first, int stride, int allow_unverified) {
    CheckpointManifest m;
    if (checkpoint_manifest_read(dir, step, allow_unverified, &m) != 0) { return CHECKPOINT_BAD_MARKER; }
    int rc = m.version == 0 ? CHECKPOINT_UNVERIFIED
                            : checkpoint_manifest_check(dir, &m, first, stride) == 0 ? CHECKPOINT_VERIFIED : CHECKPOINT_BAD_FILE;
    checkpoint_manifest_free(&m);
    return rc;
}

int checkpoint_manifest_write(const char* dir, int step, int world, const uint64_t* size_crc) {
    size_t cap = 256 + (size_t)(world + 1) * 96;
    char* text = (char*)malloc(cap);
    if (text == NULL) { return llmc_error("checkpoint at step %d: out of memory for the manifest", step); }
    size_t len = (size_t)snprintf(text, cap, CHECKPOINT_MANIFEST_TITLE " %d\nstep %d\nworld %d\n", CHECKPOINT_MANIFEST_VERSION,
                                  step, world);
    for (int i = 0; i <= world; i++) {
        char name[64];
        checkpoint_file_name(name, sizeof(name), step, i);
        len += (size_t)snprintf(text + len, cap - len, "file %s %llu %08x\n", name, (unsigned long long)size_crc[2 * i],
                                (unsigned)size_crc[2 * i + 1]);
    }
    len += (size_t)snprintf(text + len, cap - len, "crc32c %08x\n", crc32c_update(0, text, len));
    char path[4096];
    snprintf(path, sizeof(path), "%s/DONE_%08d", dir, step);
    AtomicFile f;
    int rc = atomic_open(&f, path);
    if (rc == 0) { rc = atomic_commit(&f, fwrite(text, 1, len, f.fp) == len); }
    free(text);
    return rc;
}

int checkpoint_file_sum(const char* path, uint64_t* pair) {
    uint32_t crc;
    const char* why = NULL;
    zero_watch_io_enter("read", path);  // (a stuck disk: the watchdog names the file)
    int rc = crc32c_file(path, &crc, &pair[0], &why);
    zero_watch_io_leave();
    if (rc != 0) { return llmc_error("cannot read back %s: %s", path, why); }
    pair[1] = crc;
    return 0;
}

// Moves DIR/name into the directory `to` (to NULL: removes it). Returns 0, or -1 naming it.
static int checkpoint_retire_one(const char* dir, const char* name, const char* to) {
    char path[4096], dest[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(dest, sizeof(dest), "%s/%s", to != NULL ? to : "", name);
    int rc = to != NULL ? rename(path, dest) : remove(path);
    if (rc != 0 && errno != ENOENT) {
        return llmc_error("cannot %s %s%s%s: %s", to != NULL ? "move" : "remove", path, to != NULL ? " to " : "",
                          to != NULL ? to : "", strerror(errno));
    }
    return 0;
}

int checkpoint_retire(const char* dir, int step, int set_aside, char* aside, size_t n) {
    char marker[64], path[4096];
    snprintf(marker, sizeof(marker), "DONE_%08d", step);
    snprintf(path, sizeof(path), "%s/%s", dir, marker);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) { set_aside = 1; }
    aside[0] = '\0';
    for (int k = 1; set_aside && k < 100 && aside[0] == '\0'; k++) {
        if (k == 1) { snprintf(aside, n, "%s/damaged_%08d", dir, step); }
        else { snprintf(aside, n, "%s/damaged_%08d.%d", dir, step, k); }
        if (mkdir(aside, 0755) == 0) { break; }
        if (errno != EEXIST) { return llmc_error("cannot create %s: %s", aside, strerror(errno)); }
        aside[0] = '\0';
    }
    if (set_aside && aside[0] == '\0') { return llmc_error("cannot set aside the checkpoint at step %d of %s: "
                                                           "damaged_%08d to .99 exist already", step, dir, step); }
    const char* to = set_aside ? aside : NULL;
    if (checkpoint_retire_one(dir, marker, to) != 0) { return -1; }
    fsync_parent_dir(path);
    DIR* d = opendir(dir);
    if (d == NULL) { return llmc_error("cannot read %s: %s", dir, strerror(errno)); }
    int rc = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL && rc == 0) {
        int s, r, tmp, kind = checkpoint_name_parse(e->d_name, &s, &r, &tmp);
        if (kind != CHECKPOINT_FILE_NONE && s == step) { rc = checkpoint_retire_one(dir, e->d_name, to); }
    }
    closedir(d);
    fsync_parent_dir(path);
    return rc;
}
