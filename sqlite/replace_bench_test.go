package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkOpenOrReplaceMonth8GPUs is what the check adds to `up`'s start:
// OpenOrReplace against Open on the largest ledger an agent keeps, 30 days
// of one-minute averages of 8 GPUs and the host (RollupRetention) plus an
// hour of 1 s ticks.
func BenchmarkOpenOrReplaceMonth8GPUs(b *testing.B) {
	path := filepath.Join(b.TempDir(), "ledger.db")
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	l, err := Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	start := now.Add(-RollupRetention).UnixMilli()
	hour := now.Add(-FullResolution).UnixMilli()
	for _, q := range []string{
		`WITH RECURSIVE m(ms) AS (SELECT $1 UNION ALL SELECT ms + 60000 FROM m WHERE ms + 60000 < $2)
INSERT INTO host_rollups SELECT ms, 60, 35.5, '[30.1,40.2,35.3,36.4]', 1.5, 2.25, 8589934592, 68719476736,
  1024.5, 2048.5, 4096.5, 8192.5, 1, '["python3","sshd"]' FROM m`,
		`WITH RECURSIVE m(ms) AS (SELECT $1 UNION ALL SELECT ms + 60000 FROM m WHERE ms + 60000 < $2),
g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < 7)
INSERT INTO gpu_rollups SELECT ms, i, 60, 55.5, 40.25, 42949672960, 85899345920, 450.5, 65.5, 1980, 2619,
  NULL, '["python3"]' FROM m, g`,
		`WITH RECURSIVE s(ms) AS (SELECT $2 UNION ALL SELECT ms + 1000 FROM s WHERE ms + 1000 < $3)
INSERT INTO host_samples SELECT ms, 35.5, '[30.1,40.2,35.3,36.4]', 1.5, 2.25, 8589934592, 68719476736,
  1024.5, 2048.5, 4096.5, 8192.5, 1, '["python3","sshd"]' FROM s`,
		`WITH RECURSIVE s(ms) AS (SELECT $2 UNION ALL SELECT ms + 1000 FROM s WHERE ms + 1000 < $3),
g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i < 7)
INSERT INTO gpu_samples SELECT ms, i, 55.5, 40.25, 42949672960, 85899345920, 450.5, 65.5, 1980, 2619,
  NULL, '["python3"]' FROM s, g`,
	} {
		if _, err := l.db.Exec(q, start, hour, now.UnixMilli()); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("ledger: %.1f MB", float64(fi.Size())/1e6)
	for _, bm := range []struct {
		name string
		open func() (*Ledger, error)
	}{
		{"Open", func() (*Ledger, error) { return Open(context.Background(), path) }},
		{"OpenOrReplace", func() (*Ledger, error) {
			l, e, err := OpenOrReplace(context.Background(), path, now)
			if e != nil {
				b.Fatalf("the sound ledger was replaced: %+v", *e)
			}
			return l, err
		}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				l, err := bm.open()
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
