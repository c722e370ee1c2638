/* dl/file.h - the one way the library writes a file: atomically, through a
 * temporary file in the same folder.
 *
 *   dl_atomic_file f;
 *   if (dl_atomic_begin(&f, ctx, "log.csv", NULL) == DL_OK) {
 *     dl_atomic_put(&f, text, len);          // buffered, any number of times
 *     status = dl_atomic_commit(&f);         // fsync, rename over log.csv, fsync the folder
 *   }                                        // (dl_atomic_abort(&f) drops it)
 *   dl_atomic_write(ctx, path, data, n, NULL) // the same for one buffer
 *
 * The temporary is "<path>.tmp.<pid>.<k>", created exclusively (O_EXCL, and
 * O_NOFOLLOW where the system has it: never through a file or link planted
 * there), buffered in DL_IO_BUFFER (64 KiB) blocks, each block written
 * until done (short writes continue; a write error fails), then fsync,
 * close, rename over the path, and fsync of the folder. Any failure before
 * the rename closes and removes the temporary and leaves a previous file at
 * the path exactly as it was; a crash at any point leaves the old file or
 * the new one, never a mix. (A failed fsync of the folder after the rename
 * is reported too: the new file is complete, only its durability across a
 * power cut is not guaranteed.) A path that exists and is not a regular
 * file (a device such as /dev/null, a folder, a pipe) is refused before
 * anything is written. Temporaries of the same path left by a writer that
 * was killed (its process gone, the file this user's and over a minute
 * old; Linux with /proc) are removed when the next write of that path
 * begins. Every system call goes through a dl_io_hooks table
 * (NULL: POSIX, dl_io_posix()), so tests can fail each one in turn.
 *
 * Who uses it: weights and checkpoints (io.h), the CSV log and the PNG chart
 * (report.h, run.h). Configuration: DL_IO_BUFFER. The functions need POSIX
 * (open, write, fsync, rename) and are left out under DL_NO_STDIO or on
 * other systems (DL__IO_FILES says whether they exist); dl_io_hooks is
 * always declared.
 */
#ifndef DL_FILE_H
#define DL_FILE_H

#include "core.h"
DL__HEADER_BEGIN

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if !defined(DL_NO_STDIO) && (defined(__unix__) || defined(__unix) || defined(__APPLE__))
#define DL__IO_FILES 1
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <dirent.h>
#define DL__HAVE_DIRENT_IO 1
#endif
/* flags a strict C11 build may not see declared: used when they are */
#ifdef O_NOFOLLOW
#define DL__O_NOFOLLOW O_NOFOLLOW
#else
#define DL__O_NOFOLLOW 0
#endif
#ifdef O_CLOEXEC
#define DL__O_CLOEXEC O_CLOEXEC
#else
#define DL__O_CLOEXEC 0
#endif

#ifndef DL_IO_BUFFER
/* Bytes the atomic writer buffers before each write to the file. */
#define DL_IO_BUFFER 65536
#endif

#ifdef __cplusplus
extern "C" {
#endif

DL_API char *dl__io_strdup(dl_ctx *ctx, const char *s) {
  size_t n = strlen(s) + 1;
  char *d = (char *)dl_alloc(ctx, n);
  if (d) memcpy(d, s, n);
  return d;
}

/* >>atomic writes ------------------------------------------------------------ */

/* The system calls of an atomic write; NULL fields are the POSIX defaults.
 * Each returns what POSIX's returns (errno set on failure). */
typedef struct dl_io_hooks {
  int (*create)(const char *path, void *user);                          /* new file only (O_EXCL), for writing: fd or -1 */
  ptrdiff_t (*write)(int fd, const void *buf, size_t n, void *user);    /* bytes written (short counts continue) or -1 */
  int (*fsync)(int fd, void *user); /* fsync(fd, user): 0 or -1 with errno */
  int (*close)(int fd, void *user); /* close(fd, user): 0 or -1 with errno */
  int (*rename)(const char *from, const char *to, void *user); /* rename(from, to, user): 0 or -1 with errno */
  int (*remove)(const char *path, void *user);                          /* cleanup of the temporary file */
  int (*sync_dir)(const char *dir, void *user);                         /* open the folder, fsync it, close it */
  void *user; /* passed to every hook */
} dl_io_hooks;

#ifdef DL__IO_FILES
DL_API int dl__posix_create(const char *path, void *user) {
  int fd;
  (void)user;
  do fd = open(path, O_WRONLY | O_CREAT | O_EXCL | DL__O_NOFOLLOW | DL__O_CLOEXEC, 0666);
  while (fd < 0 && errno == EINTR);
  return fd;
}
DL_API ptrdiff_t dl__posix_write(int fd, const void *buf, size_t n, void *user) {
  ptrdiff_t w;
  (void)user;
  do w = (ptrdiff_t)write(fd, buf, n);
  while (w < 0 && errno == EINTR);
  return w;
}
DL_API int dl__posix_fsync(int fd, void *user) {
  int r;
  (void)user;
  do r = fsync(fd);
  while (r < 0 && errno == EINTR);
  return r;
}
DL_API int dl__posix_close(int fd, void *user) {
  (void)user;
  return close(fd);
}
DL_API int dl__posix_rename(const char *from, const char *to, void *user) {
  (void)user;
  return rename(from, to);
}
DL_API int dl__posix_remove(const char *path, void *user) {
  (void)user;
  return unlink(path);
}
DL_API int dl__posix_sync_dir(const char *dir, void *user) {
  int fd, r, e;
  (void)user;
  do fd = open(dir, O_RDONLY);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;
  do r = fsync(fd);
  while (r < 0 && errno == EINTR);
  if (r < 0 && errno == EINVAL) r = 0; /* a file system that cannot sync folders */
  e = errno;
  close(fd);
  errno = e;
  return r;
}
/* The default hooks (POSIX); tests wrap them. */
DL_API const dl_io_hooks *dl_io_posix(void) {
  static const dl_io_hooks h = {dl__posix_create, dl__posix_write, dl__posix_fsync, dl__posix_close,
                                dl__posix_rename, dl__posix_remove, dl__posix_sync_dir, NULL};
  return &h;
}

/* A file being written atomically. */
typedef struct dl_atomic_file {
  dl_ctx *ctx;
  dl_io_hooks io;      /* the hooks in use, defaults filled in */
  char *path, *tmp, *dir;
  int fd;              /* -1 once closed */
  unsigned char *buf;  /* DL_IO_BUFFER bytes */
  size_t used;
  dl_status status;    /* first failure (sticky) */
} dl_atomic_file;

DL_API void dl__atomic_release(dl_atomic_file *f) {
  dl_free(f->ctx, f->path);
  dl_free(f->ctx, f->tmp);
  dl_free(f->ctx, f->dir);
  dl_free(f->ctx, f->buf);
  f->path = f->tmp = f->dir = NULL;
  f->buf = NULL;
}
/* Close (if open) and remove the temporary file; release everything. A
 * previous file at the path is untouched. Safe after a failed begin. */
DL_API void dl_atomic_abort(dl_atomic_file *f) {
  int e = errno;
  if (f->fd >= 0) f->io.close(f->fd, f->io.user);
  f->fd = -1;
  if (f->tmp) f->io.remove(f->tmp, f->io.user);
  dl__atomic_release(f);
  errno = e;
}
DL_API dl_status dl__atomic_fail(dl_atomic_file *f, const char *what) {
  int e = errno;
  dl_status s = dl_fail(f->ctx, DL_ERR_IO, "%s '%.200s': %s (the previous '%.200s', if any, is left as it was)", what,
                        f->tmp ? f->tmp : "", strerror(e), f->path ? f->path : "");
  f->status = s;
  dl_atomic_abort(f);
  return s;
}

/* Remove the temporaries of earlier atomic writes of `base` in folder dir
 * ("<base>.tmp.<pid>.<k>") that a killed writer left behind: regular files
 * of this user, last written more than a minute ago, whose process no
 * longer exists. Only on Linux with /proc mounted (a process's existence
 * is /proc/<pid>; under strict C11 kill() is not declared); elsewhere, or
 * when /proc/self is missing, nothing is removed. A live writer's file is
 * never touched (its process exists, or it is being written: recent). */
DL_API void dl__atomic_sweep(const char *dir, const char *base) {
#if defined(__linux__) && defined(DL__HAVE_DIRENT_IO)
  size_t bl = strlen(base);
  long me = (long)getpid();
  time_t now = time(NULL);
  DIR *d;
  struct dirent *e;
  struct stat self;
  if (stat("/proc/self", &self) != 0 || !(d = opendir(dir))) return;
  while ((e = readdir(d)) != NULL) {
    const char *n = e->d_name, *p;
    char *end, proc[64], full[4096];
    long pid;
    struct stat sb;
    if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0) continue;
    p = n + bl + 5;
    pid = strtol(p, &end, 10);
    if (end == p || *end != '.' || pid <= 0 || pid == me) continue;
    p = end + 1;
    (void)strtol(p, &end, 10);
    if (end == p || *end) continue;
    snprintf(proc, sizeof proc, "/proc/%ld", pid);
    if (stat(proc, &sb) == 0 || errno != ENOENT) continue; /* alive, or cannot tell */
    if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, n) >= sizeof full) continue;
    if (stat(full, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() && sb.st_mtime + 60 < now)
      unlink(full);
  }
  closedir(d);
#else
  (void)dir;
  (void)base;
#endif
}

/* Start writing `path` atomically: creates "<path>.tmp.<pid>.<k>" in the
 * same folder (exclusively: never through a file or link already there).
 * A path that exists and is not a regular file (/dev/null, a folder) is
 * refused with DL_ERR_IO before anything is created. Temporaries of this
 * path left by writers that were killed are removed first. io NULL: POSIX.
 * DL_OK, or DL_ERR_IO / DL_ERR_NOMEM (nothing left behind). */
DL_API dl_status dl_atomic_begin(dl_atomic_file *f, dl_ctx *ctx, const char *path, const dl_io_hooks *io) {
  const dl_io_hooks *def = dl_io_posix();
  const char *slash = strrchr(path, '/');
  size_t n = strlen(path), dn;
  int k;
  memset(f, 0, sizeof *f);
  f->ctx = ctx;
  f->fd = -1;
  f->io = io ? *io : *def;
  if (!f->io.create) f->io.create = def->create;
  if (!f->io.write) f->io.write = def->write;
  if (!f->io.fsync) f->io.fsync = def->fsync;
  if (!f->io.close) f->io.close = def->close;
  if (!f->io.rename) f->io.rename = def->rename;
  if (!f->io.remove) f->io.remove = def->remove;
  if (!f->io.sync_dir) f->io.sync_dir = def->sync_dir;
  if (!n || path[n - 1] == '/') return f->status = dl_fail(ctx, DL_ERR_ARG, "atomic write: '%.200s' is not a file name", path);
  dn = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
  f->path = dl__io_strdup(ctx, path);
  f->tmp = (char *)dl_alloc(ctx, n + 48);
  f->dir = (char *)dl_alloc(ctx, dn + 1);
  f->buf = (unsigned char *)dl_alloc(ctx, DL_IO_BUFFER);
  if (!f->path || !f->tmp || !f->dir || !f->buf) {
    dl__atomic_release(f);
    return f->status = dl_fail(ctx, DL_ERR_NOMEM, "cannot write '%.200s': out of memory for the writer (%zu bytes)",
                               path, 2 * n + dn + 50 + (size_t)DL_IO_BUFFER);
  }
  if (slash) memcpy(f->dir, path, dn);
  else f->dir[0] = '.';
  f->dir[dn] = 0;
  { /* an existing target must be a regular file: never replace a device, a folder or a socket */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
      dl_status s = dl_fail(ctx, DL_ERR_IO, "'%.200s' exists and is not a regular file (a device, folder, pipe or "
                            "socket): refused, nothing written", path);
      dl__atomic_release(f);
      return f->status = s;
    }
  }
  dl__atomic_sweep(f->dir, slash ? slash + 1 : path);
  for (k = 0; k < 100; k++) {
    snprintf(f->tmp, n + 48, "%s.tmp.%ld.%d", path, (long)getpid(), k);
    f->fd = f->io.create(f->tmp, f->io.user);
    if (f->fd >= 0 || errno != EEXIST) break;
  }
  if (f->fd < 0) {
    int e = errno;
    dl_status s = dl_fail(ctx, DL_ERR_IO, "cannot create the temporary file '%.200s': %s (the previous '%.200s', if any, is left as it was)",
                          f->tmp, strerror(e), path);
    dl_free(ctx, f->tmp);
    f->tmp = NULL; /* not ours: nothing to remove */
    dl__atomic_release(f);
    return f->status = s;
  }
  return DL_OK;
}
DL_API dl_status dl__atomic_flush(dl_atomic_file *f) {
  size_t at = 0;
  while (at < f->used) {
    ptrdiff_t w = f->io.write(f->fd, f->buf + at, f->used - at, f->io.user);
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return dl__atomic_fail(f, "cannot write");
    }
    at += (size_t)w;
  }
  f->used = 0;
  return DL_OK;
}
/* Append n bytes (buffered). On failure the file is aborted (temporary
 * removed) and every later call returns the same status. */
DL_API dl_status dl_atomic_put(dl_atomic_file *f, const void *data, size_t n) {
  const unsigned char *p = (const unsigned char *)data;
  if (f->status != DL_OK) return f->status;
  while (n) {
    size_t k = DL_IO_BUFFER - f->used;
    if (k > n) k = n;
    memcpy(f->buf + f->used, p, k);
    f->used += k;
    p += k;
    n -= k;
    if (f->used == DL_IO_BUFFER && dl__atomic_flush(f) != DL_OK) return f->status;
  }
  return DL_OK;
}
/* Flush, fsync, close, rename over the path, fsync the folder; release.
 * DL_OK, or DL_ERR_IO (before the rename: the temporary is removed and the
 * previous file untouched; after it, only the folder's fsync failed and the
 * new file is in place). */
DL_API dl_status dl_atomic_commit(dl_atomic_file *f) {
  int r;
  if (f->status != DL_OK) {
    dl_atomic_abort(f);
    return f->status;
  }
  if (f->used && dl__atomic_flush(f) != DL_OK) return f->status;
  if (f->io.fsync(f->fd, f->io.user) != 0) return dl__atomic_fail(f, "cannot fsync");
  r = f->io.close(f->fd, f->io.user);
  f->fd = -1;
  if (r != 0) return dl__atomic_fail(f, "cannot close");
  if (f->io.rename(f->tmp, f->path, f->io.user) != 0) return dl__atomic_fail(f, "cannot rename");
  if (f->io.sync_dir(f->dir, f->io.user) != 0) {
    int e = errno;
    f->status = dl_fail(f->ctx, DL_ERR_IO, "'%.200s' was written and renamed into place, but fsync of its folder '%.200s' failed: %s",
                        f->path, f->dir, strerror(e));
    dl__atomic_release(f);
    return f->status;
  }
  dl__atomic_release(f);
  return DL_OK;
}
/* Write data[0 .. n) to path atomically. */
DL_API dl_status dl_atomic_write(dl_ctx *ctx, const char *path, const void *data, size_t n, const dl_io_hooks *io) {
  dl_atomic_file f;
  dl_status s = dl_atomic_begin(&f, ctx, path, io);
  if (s != DL_OK) return s;
  dl_atomic_put(&f, data, n);
  return dl_atomic_commit(&f);
}
#endif /* DL__IO_FILES */

#ifdef __cplusplus
}
#endif
DL__HEADER_END
#endif /* DL_FILE_H */
