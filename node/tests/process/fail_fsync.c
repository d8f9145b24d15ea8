/*
 * A broken disk for one real node, preloaded into its process (LD_PRELOAD): while the file named
 * by FAIL_FSYNC_WHEN exists, every fsync, fdatasync and syncfs fails with EIO and syncs nothing,
 * as a disk whose writeback failed reports it (Linux then marks the pages clean: a later sync
 * that succeeds vouches for nothing, PostgreSQL's "fsyncgate"). Writes themselves still reach
 * the page cache. Without the file, or without the variable, every call goes to the C library.
 *
 * Compiled by the process test that uses it (fsync_failure.rs), with the system's C compiler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static int failing(void) {
    const char *trigger = getenv("FAIL_FSYNC_WHEN");
    return trigger != NULL && trigger[0] != '\0' && access(trigger, F_OK) == 0;
}

static int pass(const char *name, int fd) {
    int (*real)(int) = (int (*)(int))dlsym(RTLD_NEXT, name);
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd);
}

int fsync(int fd) {
    if (failing()) {
        errno = EIO;
        return -1;
    }
    return pass("fsync", fd);
}

int fdatasync(int fd) {
    if (failing()) {
        errno = EIO;
        return -1;
    }
    return pass("fdatasync", fd);
}

int syncfs(int fd) {
    if (failing()) {
        errno = EIO;
        return -1;
    }
    return pass("syncfs", fd);
}
