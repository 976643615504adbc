// Command gwpack is the part of scripts/package.sh that a shell cannot do
// well: it writes the container image as an OCI layout without a Docker
// daemon (go-containerregistry), makes `helm package`'s output reproducible,
// and serves a throwaway in-memory OCI registry for the chart's round trip
// in the packaging tests.
//
//	gwpack image -out dist/oci -version V -revision R -created T -bin amd64=PATH [-bin arm64=PATH]
//	gwpack retime -mtime EPOCH FILE.tgz
//	gwpack registry [-addr 127.0.0.1:0]
//
// It lives in its own module (packaging/tools) so that gpuwarden's own
// dependency graph does not carry the packaging tools.
package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gwpack image|retime|registry [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "image":
		err = imageCommand(os.Args[2:])
	case "retime":
		err = retimeCommand(os.Args[2:])
	case "registry":
		err = registryCommand(os.Args[2:])
	default:
		err = usageError{fmt.Errorf("unknown command %q: want image, retime or registry", os.Args[1])}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gwpack:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is bad input on the command line: exit code 2.
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }
