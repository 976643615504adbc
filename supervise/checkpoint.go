package supervise

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
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

// Commit makes the checkpoint in dir, a folder directly under
// root/incoming, durable and visible under root/committed, so that a crash
// at any moment leaves either no checkpoint or a whole one.
func Commit(root, dir string) (gpuwarden.Checkpoint, error) {
	r, err := OpenRoot(root)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint: %w", err)
	}
	defer r.Close()
	return commit(r, dir, time.Now, nil)
}

func commit(r *Root, dir string, now func() time.Time, cache *hashCache) (gpuwarden.Checkpoint, error) {
	rel, err := r.rel(dir)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint: %w", err)
	}
	dir = r.abs(rel)
	unlock, err := r.lock()
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint: %w", err)
	}
	defer unlock()

	// Checked under the lock: a concurrent `gpuwarden checkpoint commit` of
	// the same directory may have moved it away a moment ago.
	if parent(rel) == CommittedDir {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EConflict, "commit checkpoint %s: already committed", dir)
	}
	if parent(rel) != IncomingDir {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EInvalid, "commit checkpoint %s: not a folder directly under %s", dir, r.abs(IncomingDir)).
			WithHint("write each checkpoint into its own folder under $%s", EnvCheckpointDir)
	}
	if err := r.noSymlinks(rel); err != nil {
		if errors.Is(err, errSymlink) {
			return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EInvalid, "commit checkpoint %s: %v", dir, err).
				WithHint("write the checkpoint's files into the folder itself; gpuwarden never follows a link out of it")
		}
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	info, err := r.fs.Lstat(rel)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	if !info.IsDir() {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EInvalid, "commit checkpoint %s: not a directory", dir)
	}
	// The name is checked before any hashing: it travels to the store, to
	// other boxes and, through {resume}, into the job's shell, so only
	// gpuwarden's strict form is ever committed.
	base := path.Base(rel)
	if err := gpuwarden.CheckCheckpointFolder(base); err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}

	files, subdirs, err := r.hashTree(rel, cache)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	if len(files) == 0 {
		return gpuwarden.Checkpoint{}, gpuwarden.Errorf(gpuwarden.EInvalid, "commit checkpoint %s: it holds no files", dir).
			WithHint("write the checkpoint's files before its %s marker", MarkerName)
	}
	seq, err := r.nextSeq()
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	name, err := gpuwarden.CommittedCheckpointName(int64(seq), base)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	target := CommittedDir + "/" + name
	cp := gpuwarden.Checkpoint{
		Name:      name,
		Path:      r.abs(target),
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
	if err := r.rename(rel, target); err != nil {
		var hint string
		if errors.Is(err, syscall.EXDEV) {
			hint = fmt.Sprintf("write checkpoints under %s: a commit is a rename and cannot cross filesystems", r.abs(IncomingDir))
		}
		e := &gpuwarden.Error{Code: gpuwarden.EInvalid, Message: "commit checkpoint " + dir, Err: err}
		if hint != "" {
			return gpuwarden.Checkpoint{}, e.WithHint("%s", hint)
		}
		return gpuwarden.Checkpoint{}, e
	}
	if err := r.syncDir(CommittedDir); err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("commit checkpoint %s: %w", dir, err)
	}
	// The old entry's removal is durable too, so a crash cannot resurrect a
	// second copy under incoming/ that the watcher would commit again.
	_ = r.syncDir(IncomingDir)
	// The marker goes only now: removed before the rename, a crash would
	// leave an unmarked directory that looks like a partial write. Left
	// behind by a crash, it is harmless, since validation ignores files
	// outside the manifest.
	if err := r.fs.Remove(target + "/" + MarkerName); err == nil {
		_ = r.syncDir(target)
	}
	return cp, nil
}

// hashTree hashes and fsyncs every file of the checkpoint at rel except the
// marker and the manifest, returning them sorted by path, and lists its
// directories (the checkpoint's own first) for fsync.
func (r *Root) hashTree(rel string, cache *hashCache) ([]gpuwarden.ManifestFile, []string, error) {
	return manifest.Walk(r.abs(rel),
		func(name string) bool { return name == MarkerName },
		func(p string) (int64, string, error) {
			frel, err := r.rel(p)
			if err != nil {
				return 0, "", err
			}
			return r.hashFile(frel, cache, true)
		})
}

// hashFile returns a file's size and sha256 through the cache; with sync it
// also fsyncs the file and hashes it afresh.
func (r *Root) hashFile(rel string, cache *hashCache, sync bool) (int64, string, error) {
	f, err := r.openFile(rel)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	if !info.Mode().IsRegular() {
		return 0, "", fmt.Errorf("%s is not a regular file", rel)
	}
	key, keyed := statKey(info)
	if keyed && !sync {
		if sum, ok := cache.get(key); ok {
			return info.Size(), sum, nil
		}
	}
	n, sum, err := manifest.Sum(f, r.abs(rel), sync)
	if err != nil {
		return 0, "", err
	}
	if keyed && n == info.Size() {
		cache.put(key, sum)
	}
	return n, sum, nil
}

// lock takes an exclusive flock on root/.lock, because commits can come
// from the supervisor's watcher and from `gpuwarden checkpoint commit` in the
// job at once, and both pick the next sequence number.
func (r *Root) lock() (func(), error) {
	f, err := r.fs.OpenFile(lockName, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", r.path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", r.path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// seqOf reads the sequence number of a committed name, -1 for a name
// gpuwarden does not write (gpuwarden.ParseCheckpointName): only names of
// that form are chosen, resumed or pruned.
func seqOf(name string) int {
	seq, _, ok := gpuwarden.ParseCheckpointName(name)
	if !ok {
		return -1
	}
	return int(seq)
}

func (r *Root) nextSeq() (int, error) {
	entries, err := r.readDir(CommittedDir)
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

// validate reads the manifest of committed checkpoint name and checks every
// file's presence, size and sha256, opening each without following a
// symlink; an error says why the checkpoint is torn. A manifest that lists
// no file vouches for nothing and is torn too.
func (r *Root) validate(name string, cache *hashCache) (gpuwarden.Checkpoint, error) {
	dir := CommittedDir + "/" + name
	if err := r.noSymlinks(dir); err != nil {
		return gpuwarden.Checkpoint{}, err
	}
	f, err := r.openFile(dir + "/" + manifest.Name)
	if errors.Is(err, fs.ErrNotExist) {
		return gpuwarden.Checkpoint{}, errors.New("no manifest.json: the commit never finished")
	}
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("read manifest: %w", err)
	}
	// A size over the bound is refused before a byte of it is read.
	if info, err := f.Stat(); err == nil && info.Size() > maxManifest {
		f.Close()
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest.json is over %d bytes", maxManifest)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	f.Close()
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("read manifest: %w", err)
	}
	if len(data) > maxManifest {
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest.json is over %d bytes", maxManifest)
	}
	// Decode also refuses paths that would leave the checkpoint directory.
	cp, err := manifest.Decode(data, name)
	if err != nil {
		return gpuwarden.Checkpoint{}, fmt.Errorf("manifest.json unreadable: %w", err)
	}
	if len(cp.Files) == 0 {
		return gpuwarden.Checkpoint{}, errors.New("manifest.json lists no files, so nothing in it was verified")
	}
	for _, mf := range cp.Files {
		rel := dir + "/" + mf.Path
		if err := r.noSymlinks(rel); errors.Is(err, errSymlink) {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s lies behind a symlink, which is never followed (%v)", mf.Path, err)
		}
		info, err := r.fs.Lstat(rel)
		if errors.Is(err, fs.ErrNotExist) {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s is missing", mf.Path)
		}
		if err != nil {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s: %w", mf.Path, err)
		}
		if !info.Mode().IsRegular() {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s is not a regular file", mf.Path)
		}
		if info.Size() != mf.Size {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s is %d bytes, the manifest says %d", mf.Path, info.Size(), mf.Size)
		}
		_, sum, err := r.hashFile(rel, cache, false)
		if errors.Is(err, errSymlink) {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s lies behind a symlink, which is never followed", mf.Path)
		}
		if err != nil {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s: %w", mf.Path, err)
		}
		if sum != mf.SHA256 {
			return gpuwarden.Checkpoint{}, fmt.Errorf("%s has sha256 %.12s…, the manifest says %.12s…", mf.Path, sum, mf.SHA256)
		}
	}
	cp.Name = name
	cp.Path = r.abs(dir)
	return cp, nil
}

// maxManifest bounds a manifest read: one of a million files is some 150 MB.
const maxManifest = manifest.MaxSize

// entry is one checkpoint gpuwarden committed under committed/.
type entry struct {
	name string
	seq  int
}

// entries lists the checkpoints gpuwarden committed, oldest first: real
// directories whose name has the form gpuwarden.ParseCheckpointName reads.
// Anything else in committed/ (a folder a person put there, a name with a
// shell's metacharacters, a symlink, a prune in progress) is not
// gpuwarden's and is never chosen, pruned or deleted.
func (r *Root) entries() ([]entry, error) {
	des, err := r.readDir(CommittedDir)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var out []entry
	for _, d := range des {
		seq := seqOf(d.Name())
		if !d.IsDir() || seq < 0 {
			continue
		}
		out = append(out, entry{name: d.Name(), seq: seq})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].seq != out[j].seq {
			return out[i].seq < out[j].seq
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// foreign lists the entries of committed/ that are not gpuwarden's
// checkpoints, for a warning: they are never resumed, and a person may
// wonder why. Hidden entries (a prune or a pull in progress) are
// gpuwarden's own and left out.
func (r *Root) foreign() []string {
	des, err := r.readDir(CommittedDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range des {
		if strings.HasPrefix(d.Name(), ".") {
			continue
		}
		if !d.IsDir() || seqOf(d.Name()) < 0 {
			out = append(out, d.Name())
		}
	}
	return out
}

// List returns the committed checkpoints oldest first, each fully validated;
// the torn ones come back apart, with the reason.
func List(root string) ([]gpuwarden.Checkpoint, []Torn, error) {
	r, err := OpenRoot(root)
	if err != nil {
		return nil, nil, fmt.Errorf("list checkpoints: %w", err)
	}
	defer r.Close()
	return r.list()
}

func (r *Root) list() ([]gpuwarden.Checkpoint, []Torn, error) {
	es, err := r.entries()
	if err != nil {
		return nil, nil, err
	}
	var valid []gpuwarden.Checkpoint
	var torn []Torn
	for _, e := range es {
		cp, err := r.validate(e.name, nil)
		if err != nil {
			torn = append(torn, Torn{Name: e.name, Path: r.abs(CommittedDir + "/" + e.name), Reason: err.Error()})
			continue
		}
		valid = append(valid, cp)
	}
	return valid, torn, nil
}

// Newest returns the newest valid committed checkpoint, hashing every file,
// because this is the one a job will resume from; ok is false when none is valid.
func Newest(root string) (gpuwarden.Checkpoint, bool, error) {
	r, err := OpenRoot(root)
	if err != nil {
		return gpuwarden.Checkpoint{}, false, fmt.Errorf("newest checkpoint: %w", err)
	}
	defer r.Close()
	cp, ok, _, err := r.newest()
	return cp, ok, err
}

// newest also returns the torn checkpoints it skipped on the way.
func (r *Root) newest() (gpuwarden.Checkpoint, bool, []Torn, error) {
	es, err := r.entries()
	if err != nil {
		return gpuwarden.Checkpoint{}, false, nil, err
	}
	var torn []Torn
	for i := len(es) - 1; i >= 0; i-- {
		cp, err := r.validate(es[i].name, nil)
		if err != nil {
			torn = append(torn, Torn{Name: es[i].name, Path: r.abs(CommittedDir + "/" + es[i].name), Reason: err.Error()})
			continue
		}
		return cp, true, torn, nil
	}
	return gpuwarden.Checkpoint{}, false, torn, nil
}

// Prune removes all but the newest keep valid checkpoints, and the torn ones
// older than the newest valid one; it returns the names it removed. Torn ones
// newer than every valid one stay, for a person to look at, and so does
// everything in committed/ that gpuwarden did not commit.
func Prune(root string, keep int) ([]string, error) {
	r, err := OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints: %w", err)
	}
	defer r.Close()
	return r.prune(keep, nil, 0)
}

// prune keeps the newest keep valid checkpoints among those with a
// sequence number up to upTo (all, when upTo is 0): a supervisor passes the
// checkpoint it just reported, so that a fast job's newer commits are never
// pruned before they are reported and synced.
func (r *Root) prune(keep int, cache *hashCache, upTo int) ([]string, error) {
	if keep < 1 {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "prune checkpoints: keep %d: keep at least 1", keep)
	}
	unlock, err := r.lock()
	if err != nil {
		return nil, fmt.Errorf("prune checkpoints: %w", err)
	}
	defer unlock()
	es, err := r.entries()
	if err != nil {
		return nil, err
	}
	if upTo > 0 {
		for len(es) > 0 && es[len(es)-1].seq > upTo {
			es = es[:len(es)-1]
		}
	}
	cache.beginPass()
	defer cache.endPass()
	var removed []string
	valid := 0
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if valid < keep {
			if _, err := r.validate(e.name, cache); err == nil {
				valid++
				continue
			}
			if valid == 0 {
				continue // torn and newer than every valid one
			}
		}
		if err := r.removeCheckpoint(e.name); err != nil {
			return removed, fmt.Errorf("prune checkpoints: %w", err)
		}
		removed = append(removed, e.name)
	}
	// Leftovers of a prune that crashed between its rename and its removal.
	des, _ := r.readDir(CommittedDir)
	for _, d := range des {
		if name, ok := strings.CutPrefix(d.Name(), trashPrefix); ok && d.IsDir() && seqOf(name) >= 0 {
			_ = r.removeAll(CommittedDir + "/" + d.Name())
		}
	}
	return removed, nil
}

// removeCheckpoint renames a checkpoint out of sight before deleting it, so
// that a crash halfway never leaves a half-deleted directory that looks like
// a checkpoint.
func (r *Root) removeCheckpoint(name string) error {
	trash := CommittedDir + "/" + trashPrefix + name
	if err := r.rename(CommittedDir+"/"+name, trash); err != nil {
		return err
	}
	_ = r.syncDir(CommittedDir)
	return r.removeAll(trash)
}

// cleanIncoming removes the unmarked directories under incoming/: with no
// job running they are partial writes that a new attempt must not mix with
// its own files of the same name. incoming/ is gpuwarden's, handed to the
// job; a symlink in it is left alone, never followed.
func (r *Root) cleanIncoming() ([]string, error) {
	des, err := r.readDir(IncomingDir)
	if err != nil {
		return nil, fmt.Errorf("clean incoming checkpoints: %w", err)
	}
	var removed []string
	for _, d := range des {
		if !d.IsDir() {
			continue
		}
		rel := IncomingDir + "/" + d.Name()
		if info, err := r.fs.Lstat(rel + "/" + MarkerName); err == nil && info.Mode().IsRegular() {
			continue
		}
		if err := r.removeAll(rel); err != nil {
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
