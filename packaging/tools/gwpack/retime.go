package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

func retimeCommand(args []string) error {
	fs := flag.NewFlagSet("retime", flag.ContinueOnError)
	mtime := fs.String("mtime", os.Getenv("SOURCE_DATE_EPOCH"), "seconds since 1970 to give every entry (default $SOURCE_DATE_EPOCH)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() != 1 {
		return usageError{errors.New("retime: want one FILE.tgz")}
	}
	sec, err := strconv.ParseInt(*mtime, 10, 64)
	if err != nil {
		return usageError{fmt.Errorf("retime: -mtime %q: want seconds since 1970", *mtime)}
	}
	return retime(fs.Arg(0), time.Unix(sec, 0).UTC())
}

// retime rewrites a gzipped tar in place with every entry's times set to
// mtime and no time in the gzip header. `helm package` stamps each entry
// with the clock (chartutil.Save), so two packagings of one commit differ
// by their timestamps only; this removes that difference and keeps the
// order, the contents and helm's gzip header fields.
func retime(name string, mtime time.Time) error {
	in, err := os.ReadFile(name)
	if err != nil {
		return fmt.Errorf("retime: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(in))
	if err != nil {
		return fmt.Errorf("retime: %s: %w", name, err)
	}
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return err
	}
	zw.Header = gzip.Header{Comment: zr.Comment, Extra: zr.Extra, Name: zr.Name, OS: zr.OS}
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("retime: %s: %w", name, err)
		}
		h.ModTime, h.AccessTime, h.ChangeTime = mtime, time.Time{}, time.Time{}
		h.Uname, h.Gname = "", ""
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("retime: %s: %s: %w", name, h.Name, err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("retime: %s: %s: %w", name, h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o644); err != nil {
		return fmt.Errorf("retime: %w", err)
	}
	return os.Rename(tmp, name)
}
