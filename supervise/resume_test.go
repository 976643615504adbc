package supervise

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestShellScript(t *testing.T) {
	for _, tt := range []struct {
		argv []string
		want int
	}{
		{[]string{"sh", "-c", "s"}, 2},
		{[]string{"/bin/bash", "-euc", "s", "name", "arg"}, 2},
		{[]string{"bash", "-e", "-o", "pipefail", "-c", "s"}, 5},
		{[]string{"bash", "-O", "extglob", "-c", "s"}, 4},
		{[]string{"zsh", "--norc", "-c", "s"}, 3},
		{[]string{"bash", "--rcfile", "rc", "-c", "s"}, 4},
		{[]string{"dash", "-c", "--", "s"}, 3},
		{[]string{"busybox", "sh", "-c", "s"}, 3},
		{[]string{"/usr/bin/ksh", "-c", "s"}, 2},
		{[]string{"sh", "script.sh", "{resume}"}, -1},
		{[]string{"sh", "-c"}, -1},
		{[]string{"sh", "+c", "s"}, -1},
		{[]string{"busybox", "ls", "-c", "s"}, -1},
		{[]string{"python3", "-c", "s"}, -1},
		{[]string{"fish", "-c", "s"}, -1},
		{[]string{"shx", "-c", "s"}, -1},
		{nil, -1},
	} {
		if got := shellScript(tt.argv); got != tt.want {
			t.Errorf("shellScript(%q) = %d, want %d", tt.argv, got, tt.want)
		}
	}
}

func TestSubstituteResume(t *testing.T) {
	const safe = "/ckpt/committed/000003-step-000120"
	const odd = "/data/my ckpt's dir/committed/000003-step-000120"
	for _, tt := range []struct {
		name   string
		argv   []string
		resume string
		want   []string
	}{
		{"a plain argv gets the path raw, space and quote included",
			[]string{"python", "train.py", "--resume={resume}", "{resume}"}, odd,
			[]string{"python", "train.py", "--resume=" + odd, odd}},
		{"a shell script with a safe path looks as written",
			[]string{"sh", "-c", "python train.py --resume {resume}"}, safe,
			[]string{"sh", "-c", "python train.py --resume " + safe}},
		{"a fresh start leaves the placeholder empty, in a script too",
			[]string{"sh", "-c", "python train.py --resume={resume}"}, "",
			[]string{"sh", "-c", "python train.py --resume="}},
		{"an odd path in code is single-quoted",
			[]string{"sh", "-c", "ls {resume}"}, odd,
			[]string{"sh", "-c", `ls '/data/my ckpt'\''s dir/committed/000003-step-000120'`}},
		{"inside double quotes it is escaped, not quoted",
			[]string{"sh", "-c", `ls "{resume}"`}, `/a b/$x"y`,
			[]string{"sh", "-c", `ls "/a b/\$x\"y"`}},
		{"inside single quotes the quote is closed and reopened",
			[]string{"sh", "-c", `echo 'at {resume}.'`}, odd,
			[]string{"sh", "-c", `echo 'at ''/data/my ckpt'\''s dir/committed/000003-step-000120''.'`}},
		{"arguments after the script stay raw: the shell does not parse them",
			[]string{"bash", "-c", `ls "$1"`, "job", "{resume}"}, odd,
			[]string{"bash", "-c", `ls "$1"`, "job", odd}},
		{"a comment is left alone",
			[]string{"sh", "-c", "true # {resume}\nls {resume}"}, "/a b",
			[]string{"sh", "-c", "true # {resume}\nls '/a b'"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := substituteResume(tt.argv, tt.resume); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("substituteResume(%q, %q)\n got %q\nwant %q", tt.argv, tt.resume, got, tt.want)
			}
		})
	}
}

// TestSubstituteResumeThroughARealShell runs each script through the
// shells on this box and checks that the path arrives as one intact
// argument, whatever its quoting context, and that nothing in it runs.
func TestSubstituteResumeThroughARealShell(t *testing.T) {
	var shells [][]string
	for _, sh := range []string{"sh", "bash", "dash", "zsh", "mksh", "ksh"} {
		if p, err := exec.LookPath(sh); err == nil {
			shells = append(shells, []string{p})
		}
	}
	if p, err := exec.LookPath("busybox"); err == nil {
		shells = append(shells, []string{p, "sh"})
	}
	if len(shells) == 0 {
		t.Fatal("no POSIX shell on PATH")
	}
	dir := t.TempDir()
	paths := []string{
		"/ckpt/committed/000003-step-000120",
		filepath.Join(dir, "my ckpt's dir", "committed", "000003-step-000120"),
		filepath.Join(dir, `a "b" $HOME`+"`id`"+`\c`, "committed", "000009-x$(touch${IFS}PWNED)"),
		filepath.Join(dir, "x';touch PWNED;'y"),
	}
	// Each script prints the path once per context, one line each.
	scripts := []string{
		`printf '%s\n' {resume}`,
		`printf '%s\n' "{resume}"`,
		`printf '%s\n' '{resume}'`,
		`printf '%s\n' "$(printf '%s' {resume})"`,
		`printf '%s\n' "$(printf '%s' "{resume}")"`,
		`x={resume}; printf '%s\n' "$x"`,
		`printf '%s\n' "pre-{resume}-post" | sed 's/^pre-//; s/-post$//'`,
	}
	for _, sh := range shells {
		for _, p := range paths {
			for _, script := range scripts {
				argv := substituteResume(append(append([]string{}, sh...), "-c", script), p)
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("%s -c %q: %v\n%s", sh, argv[len(argv)-1], err, out)
					continue
				}
				if got := strings.TrimSuffix(string(out), "\n"); got != p {
					t.Errorf("%s -c %q printed %q, want %q", sh, argv[len(argv)-1], got, p)
				}
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "PWNED")); err == nil {
		t.Error("a path's command ran in the shell: PWNED exists")
	}
}
