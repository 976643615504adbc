// unreaped: a child process whose parent cannot reap it, for the test of
// the GPU child bound (gpu_test.go). It forks a tracer that leaves the
// process group (setsid, so a kill of the group misses it) and
// PTRACE_SEIZEs this process, then never calls wait. Once this process is
// killed it is a zombie that, per ptrace(2), only its tracer sees: the
// real parent's wait4 blocks until the tracer waits or exits. That is the
// parent's view of a child stuck in uninterruptible sleep in a driver:
// SIGKILL is sent and Wait does not return. It prints "tracer=PID" on
// stderr once seized, and exits 3 when ptrace is not permitted.
//
// Build: cc -O2 -o unreaped unreaped.c
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <unistd.h>

int main(void) {
	int p[2];
	if (pipe(p) != 0) return 4;
	pid_t me = getpid();
	pid_t t = fork();
	if (t < 0) return 4;
	if (t == 0) {
		setsid();
		if (ptrace(PTRACE_SEIZE, me, 0, 0) != 0) {
			perror("ptrace");
			(void)write(p[1], "E", 1);
			_exit(3);
		}
		(void)write(p[1], "R", 1);
		for (;;) pause();
	}
	char c = 0;
	if (read(p[0], &c, 1) != 1 || c != 'R') return 3;
	fprintf(stderr, "tracer=%d\n", (int)t);
	fflush(stderr);
	for (;;) pause();
}
