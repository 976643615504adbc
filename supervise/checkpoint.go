package supervise

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/manifest"
)

// Names of the checkpoint layout under a checkpoint directory.
const (
	// IncomingDir is where the job writes checkpoints ($GPUWARDEN_CHECKPOINT_DIR).
	IncomingDir = "incoming"
	// CommittedDir holds committed checkpoints, one directory each.
	CommittedDir = "committed"
	// MarkerName is the file a job creates inside a checkpoint to say it is complete.
	MarkerName = ".complete"

	lockName    = ".lock"
	trashPrefix = ".trash-"
)

// Torn is a committed checkpoint that failed validation; it is reported apart
// so that it can never be mistaken for one to resume from.
type Torn struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Commit makes the checkpoint in dir durable and visible under root/committed,
// so that a crash at any moment leaves either no checkpoint or a whole one.
func Commit(root, dir string) (gpuwarden.Checkpoint, error) {
	return commit(root, dir, time.Now, nil)
}

func commit(root, dir string, now func() time.Time, cache *hashCache) (gpuwarden.Checkpoint, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint: %w", err)
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint: %w", err)
	}
	committed := filepath.Join(root, CommittedDir)
	if err := os.MkdirAll(committed, 0o755); err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint: %w", err)
	}
	unlock, err := lockRoot(root)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint: %w", err)
	}
	defer unlock()

	// Checked under the lock: a concurrent `gpuwarden checkpoint commit` of
	// the same directory may have moved it away a moment ago.
	info, err := os.Stat(dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	if !info.IsDir() {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EInvalid, "commit checkpoint %s: not a directory", dir)
	}
	if filepath.Dir(dir) == committed {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EConflict, "commit checkpoint %s: already committed", dir)
	}
	base := filepath.Base(dir)
	if base == "." || base == string(filepath.Separator) || strings.HasPrefix(base, ".") {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EInvalid, "commit checkpoint %s: give the checkpoint a plain directory name", dir)
	}

	files, subdirs, err := hashTree(dir, cache)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	seq, err := nextSeq(committed)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	name := fmt.Sprintf("%06d-%s", seq, base)
	target := filepath.Join(committed, name)
	cp := gpuwarden.Checkpoint{
		Name:      name,
		Path:      target,
		Step:      stepOf(base),
		Committed: now().UTC(),
		Files:     files,
	}
	for _, f := range files {
		cp.Bytes += f.Size
	}
	if err := manifest.WriteTo(dir, cp); err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	// Deepest first, so every entry is durable before the rename publishes it.
	for i := len(subdirs) - 1; i >= 0; i-- {
		if err := manifest.SyncDir(subdirs[i]); err != nil {
			return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
		}
	}
	if err := os.Rename(dir, target); err != nil {
		var hint string
		if errors.Is(err, syscall.EXDEV) {
			hint = fmt.Sprintf("write checkpoints under %s: a commit is a rename and cannot cross filesystems", filepath.Join(root, IncomingDir))
		}
		e := &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "commit checkpoint " + dir, Err: err}
		if hint != "" {
			return gpuwarden.Checkpoint{}, e.WithHint("%s", hint)
		}
		return gpuwarden.Checkpoint{}, e
	}
	if err := manifest.SyncDir(committed); err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	// The old entry's removal is durable too, so a crash cannot resurrect a
	// second copy under incoming/ that the watcher would commit again.
	_ = manifest.SyncDir(filepath.Dir(dir))
	// The marker goes only now: removed before the rename, a crash would
	// leave an unmarked directory that looks like a partial write. Left
	// behind by a crash, it is harmless, since validation ignores files
	// outside the manifest.
	if err := os.Remove(filepath.Join(target, MarkerName)); err == nil {
		_ = manifest.SyncDir(target)
	}
	return cp, nil
}

// hashTree hashes and fsyncs every file of a checkpoint except the marker and
// the manifest, returning them sorted by path, and lists its directories
// (the root first) for fsync.
func hashTree(dir string, cache *hashCache) ([]gpuwarden.ManifestFile, []string, error) {
	return manifest.Walk(dir,
		func(rel string) bool { return rel == MarkerName },
		func(path string) (int64, string, error) { return hashFile(path, cache, true) })
}

// hashFile returns a file's size and sha256 through the cache; with sync it
// also fsyncs the file and hashes it afresh.
func hashFile(path string, cache *hashCache, sync bool) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	key, keyed := statKey(info)
	if keyed && !sync {
		if sum, ok := cache.get(key); ok {
			return info.Size(), sum, nil
		}
	}
	n, sum, err := manifest.Sum(f, path, sync)
	if err != nil {
		return 0, "", err
	}
	if keyed && n == info.Size() {
		cache.put(key, sum)
	}
	return n, sum, nil
}

// lockRoot takes an exclusive flock on root/.lock, because commits can come
// from the supervisor's watcher and from `gpuwarden checkpoint commit` in the
// job at once, and both pick the next sequence number.
func lockRoot(root string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(root, lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", root, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", root, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// seqOf reads the sequence prefix of a committed name, -1 when it has none.
func seqOf(name string) int {
	digits, _, ok := strings.Cut(name, "-")
	if !ok || digits == "" {
		return -1
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func nextSeq(committed string) (int, error) {
	entries, err := os.ReadDir(committed)
	if err != nil {
		return 0, err
	}
	highest := 0
	for _, e := range entries {
		if n := seqOf(strings.TrimPrefix(e.Name(), trashPrefix)); n > highest {
			highest = n
		}
	}
	return highest + 1, nil
}

// stepOf parses the last run of digits in a checkpoint's original name
// (step-000120 → 120), -1 when there is none.
func stepOf(name string) int64 {
	end := len(name)
	for end > 0 && (name[end-1] < '0' || name[end-1] > '9') {
		end--
	}
	if end == 0 {
		return -1
	}
	start := end
	for start > 0 && name[start-1] >= '0' && name[start-1] <= '9' {
		start--
	}
	n, err := strconv.ParseInt(name[start:end], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// Validate reads a committed checkpoint's manifest and checks every file's
// presence, size and sha256; an error says why the checkpoint is torn.
func Validate(path string) (gpuwarden.Checkpoint, error) {
	return validate(path, nil)
}

func validate(path string, cache *hashCache) (gpuwarden.Checkpoint, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("validate checkpoint: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(abs, manifest.Name))
	if errors.Is(err, fs.ErrNotExist) {
		return gpuwarden.Checkpoint{}, errors.New("no manifest.json: the commit never finished")
	}
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("read manifest: %w", err)
	}
	// Decode also refuses paths that would leave the checkpoint directory.
	cp, err := manifest.Decode(data, filepath.Base(abs))
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest.json unreadable: %w", err)
	}
	for _, f := range cp.Files {
		p := filepath.Join(abs, filepath.FromSlash(f.Path))
		info, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s is missing", f.Path)
		}
		if err != nil {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s: %w", f.Path, err)
		}
		if !info.Mode().IsRegular() {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s is not a regular file", f.Path)
		}
		if info.Size() != f.Size {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s is %d bytes, the manifest says %d", f.Path, info.Size(), f.Size)
		}
		_, sum, err := hashFile(p, cache, false)
		if err != nil {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s: %w", f.Path, err)
		}
		if sum != f.SHA256 {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s has sha256 %.12s…, the manifest says %.12s…", f.Path, sum, f.SHA256)
		}
	}
	cp.Name = filepath.Base(abs)
	cp.Path = abs
	return cp, nil
}

// entry is one directory under committed/.
type entry struct {
	name string
	path string
	seq  int
}

// entries lists committed checkpoint directories oldest first, skipping
// dot-names (prunes in progress, the lock).
func entries(root string) ([]entry, error) {
	dir := filepath.Join(root, CommittedDir)
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []entry
	for _, d := range des {
		if !d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			continue
		}
		out = append(out, entry{name: d.Name(), path: filepath.Join(dir, d.Name()), seq: seqOf(d.Name())})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].seq != out[j].seq {
			return out[i].seq < out[j].seq
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// List returns the committed checkpoints oldest first, each fully validated;
// the torn ones come back apart, with the reason.
func List(root string) ([]gpuwarden.Checkpoint, []Torn, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, nil, fmt.Errorf("list checkpoints: %w", err)
	}
	es, err := entries(root)
	if err != nil {
		return nil, nil, err
	}
	var valid []gpuwarden.Checkpoint
	var torn []Torn
	for _, e := range es {
		cp, err := validate(e.path, nil)
		if err != nil {
			torn = append(torn, Torn{Name: e.name, Path: e.path, Reason: err.Error()})
			continue
		}
		valid = append(valid, cp)
	}
	return valid, torn, nil
}

// Newest returns the newest valid committed checkpoint, hashing every file,
// because this is the one a job will resume from; ok is false when none is valid.
func Newest(root string) (gpuwarden.Checkpoint, bool, error) {
	cp, ok, _, err := newest(root)
	return cp, ok, err
}

// newest also returns the torn checkpoints it skipped on the way.
func newest(root string) (gpuwarden.Checkpoint, bool, []Torn, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return gpuwarden.Checkpoint{}, false, nil, fmt.Errorf("newest checkpoint: %w", err)
	}
	es, err := entries(root)
	if err != nil {
		return gpuwarden.Checkpoint{}, false, nil, err
	}
	var torn []Torn
	for i := len(es) - 1; i >= 0; i-- {
		cp, err := validate(es[i].path, nil)
		if err != nil {
			torn = append(torn, Torn{Name: es[i].name, Path: es[i].path, Reason: err.Error()})
			continue
		}
		return cp, true, torn, nil
	}
	return gpuwarden.Checkpoint{}, false, torn, nil
}

// Prune removes all but the newest keep valid checkpoints, and the torn ones
// older than the newest valid one; it returns the names it removed. Torn ones
// newer than every valid one stay, for a person to look at.
func Prune(root string, keep int) ([]string, error) {
	return prune(root, keep, nil)
}

func prune(root string, keep int, cache *hashCache) ([]string, error) {
	if keep < 1 {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "prune checkpoints: keep %d: keep at least 1", keep)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints: %w", err)
	}
	if _, err := os.Stat(filepath.Join(root, CommittedDir)); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	unlock, err := lockRoot(root)
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints: %w", err)
	}
	defer unlock()
	es, err := entries(root)
	if err != nil {
		return nil, err
	}
	cache.beginPass()
	defer cache.endPass()
	var removed []string
	valid := 0
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if valid < keep {
			if _, err := validate(e.path, cache); err == nil {
				valid++
				continue
			}
			if valid == 0 {
				continue // torn and newer than every valid one
			}
		}
		if err := removeCheckpoint(root, e.name); err != nil {
			return removed, fmt.Errorf("prune checkpoints: %w", err)
		}
		removed = append(removed, e.name)
	}
	// Leftovers of a prune that crashed between its rename and its removal.
	des, _ := os.ReadDir(filepath.Join(root, CommittedDir))
	for _, d := range des {
		if strings.HasPrefix(d.Name(), trashPrefix) {
			_ = os.RemoveAll(filepath.Join(root, CommittedDir, d.Name()))
		}
	}
	return removed, nil
}

// removeCheckpoint renames a checkpoint out of sight before deleting it, so
// that a crash halfway never leaves a half-deleted directory that looks like
// a checkpoint.
func removeCheckpoint(root, name string) error {
	dir := filepath.Join(root, CommittedDir)
	trash := filepath.Join(dir, trashPrefix+name)
	if err := os.Rename(filepath.Join(dir, name), trash); err != nil {
		return err
	}
	_ = manifest.SyncDir(dir)
	return os.RemoveAll(trash)
}

// cleanIncoming removes the unmarked directories under root/incoming: with no
// job running they are partial writes that a new attempt must not mix with
// its own files of the same name.
func cleanIncoming(root string) ([]string, error) {
	dir := filepath.Join(root, IncomingDir)
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clean incoming checkpoints: %w", err)
	}
	var removed []string
	for _, d := range des {
		if !d.IsDir() {
			continue
		}
		p := filepath.Join(dir, d.Name())
		if _, err := os.Stat(filepath.Join(p, MarkerName)); err == nil {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return removed, fmt.Errorf("clean incoming checkpoints: %w", err)
		}
		removed = append(removed, d.Name())
	}
	return removed, nil
}

// hashCache remembers the sha256 of files this process hashed, keyed by
// device, inode, size, mtime and ctime, so that pruning after every commit
// does not re-read gigabytes of checkpoints. Any write changes ctime, which no
// one can set back; resuming (Newest) never uses the cache.
type hashCache struct {
	mu   sync.Mutex
	m    map[fileKey]cached
	pass int
}

type fileKey struct {
	dev, ino           uint64
	size, mtime, ctime int64
}

type cached struct {
	sum  string
	pass int
}

func newHashCache() *hashCache { return &hashCache{m: map[fileKey]cached{}} }

func statKey(info fs.FileInfo) (fileKey, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{
		dev:   uint64(st.Dev),
		ino:   st.Ino,
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}, true
}

func (c *hashCache) get(k fileKey) (string, bool) {
	if c == nil {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	if ok {
		v.pass = c.pass
		c.m[k] = v
	}
	return v.sum, ok
}

func (c *hashCache) put(k fileKey, sum string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k] = cached{sum: sum, pass: c.pass}
}

// beginPass and endPass bound the cache to the files a prune still keeps.
func (c *hashCache) beginPass() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.pass++
	c.mu.Unlock()
}

func (c *hashCache) endPass() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, v := range c.m {
		if v.pass < c.pass {
			delete(c.m, k)
		}
	}
}
