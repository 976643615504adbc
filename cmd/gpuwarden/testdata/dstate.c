// dstate: a child stuck in uninterruptible sleep ("D (disk sleep)") that
// SIGKILL cannot end, for the test of the GPU child bound (gpu_test.go):
// the real shape of a process stuck in a kernel driver. Root only.
//
// It mounts a FUSE file system on DIR with /dev/fuse directly (no
// fusermount), forks the file system's daemon into a session of its own
// (so a kill of this process group misses it), and stats DIR/x. The daemon
// answers FUSE_INIT and reads every later request without ever answering.
// A FUSE request the daemon has read waits uninterruptibly once a fatal
// signal arrives (fs/fuse/dev.c request_wait_answer), so after SIGKILL this
// process stays in D state until the daemon answers or its /dev/fuse closes.
// It prints "daemon=PID" on stderr before the stat; killing the daemon ends
// the stat with ENOTCONN and lets this process die. Exits 3 when it cannot
// mount (no /dev/fuse, no CAP_SYS_ADMIN).
//
// Build: cc -O2 -o dstate dstate.c
#include <fcntl.h>
#include <linux/fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

static void serve(int fd, int ready) {
	static char buf[FUSE_MIN_READ_BUFFER + 65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < (ssize_t)sizeof(struct fuse_in_header)) {
			if (n < 0) continue;
			_exit(0);
		}
		struct fuse_in_header *in = (struct fuse_in_header *)buf;
		if (in->opcode != FUSE_INIT) continue;  // read, never answered
		struct {
			struct fuse_out_header h;
			struct fuse_init_out o;
		} out;
		memset(&out, 0, sizeof out);
		out.h.len = sizeof out;
		out.h.unique = in->unique;
		out.o.major = FUSE_KERNEL_VERSION;
		out.o.minor = FUSE_KERNEL_MINOR_VERSION;
		out.o.max_write = 65536;
		out.o.max_readahead = 65536;
		if (write(fd, &out, sizeof out) != sizeof out) _exit(4);
		(void)write(ready, "R", 1);
	}
}

int main(int argc, char **argv) {
	if (argc != 2) return 2;
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("open /dev/fuse");
		return 3;
	}
	char opts[128];
	snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
	if (mount("gwstuck", argv[1], "fuse.gwstuck", MS_NOSUID | MS_NODEV, opts) != 0) {
		perror("mount fuse");
		return 3;
	}
	int p[2];
	if (pipe(p) != 0) return 4;
	pid_t d = fork();
	if (d < 0) return 4;
	if (d == 0) {
		setsid();
		int null = open("/dev/null", O_RDWR);
		dup2(null, 0), dup2(null, 1), dup2(null, 2);
		close(p[0]);
		serve(fd, p[1]);
	}
	close(fd);  // only the daemon may hold the connection open
	close(p[1]);
	char c = 0;
	if (read(p[0], &c, 1) != 1 || c != 'R') return 4;
	fprintf(stderr, "daemon=%d\n", (int)d);
	fflush(stderr);
	char path[4096];
	snprintf(path, sizeof path, "%s/x", argv[1]);
	struct stat st;
	stat(path, &st);
	return 5;  // only when the daemon is gone
}
