package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/preempt"
	"github.com/spf13/cobra"
)

// cloudFlags choose where `up` and `run` hear preemption notices from: the
// cloud's metadata service, detected or named, at addresses tests override.
type cloudFlags struct {
	cloud    string
	metadata preempt.Endpoints
}

func (f *cloudFlags) register(c *cobra.Command, usage string) {
	f.metadata = preempt.DefaultEndpoints()
	fl := c.Flags()
	fl.StringVar(&f.cloud, "cloud", "auto", usage+": auto, aws, gcp, azure or none")
	// Visible on purpose: people test notice handling against simulators,
	// such as AWS's amazon-ec2-metadata-mock (port 1338 by default).
	fl.StringVar(&f.metadata.AWS, "aws-metadata", f.metadata.AWS, "AWS instance metadata base `URL` (IMDSv2), e.g. amazon-ec2-metadata-mock's http://127.0.0.1:1338")
	fl.StringVar(&f.metadata.GCP, "gcp-metadata", f.metadata.GCP, "GCP metadata server base `URL`")
	fl.StringVar(&f.metadata.Azure, "azure-metadata", f.metadata.Azure, "Azure instance metadata base `URL` (Scheduled Events)")
}

func (f *cloudFlags) validate() error {
	f.cloud = strings.ToLower(f.cloud)
	switch f.cloud {
	case "auto", "aws", "gcp", "azure", "none":
		return nil
	}
	// Any provider the stop table knows names where the box runs, for
	// the stop that ends its bill; notices come only from the three
	// clouds with a metadata service.
	if _, ok := gpuwarden.StopSemanticsOf(f.cloud); ok {
		return nil
	}
	return gpuwarden.Errorf(gpuwarden.EInvalid, "--cloud: %q is not auto, none or a provider gpuwarden knows", f.cloud).
		WithHint("aws, gcp, azure (notices and the stop), runpod, vast, lambda, hetzner … (the stop)")
}

// hasNotices reports whether a named cloud has a notice source.
func hasNotices(cloud string) bool { return cloud == "aws" || cloud == "gcp" || cloud == "azure" }

// fakeMetadata reports whether the metadata flags point at a simulator, which
// is then polled directly even where an agent runs.
func (f *cloudFlags) fakeMetadata() bool { return f.metadata != preempt.DefaultEndpoints() }

// source finds the cloud to poll; nil means none answers or none was asked
// for, which the log says, and the caller runs without notices.
func (f *cloudFlags) source(ctx context.Context, log *slog.Logger) preempt.Source {
	if f.cloud == "none" {
		return nil
	}
	if f.cloud != "auto" && !hasNotices(f.cloud) {
		log.Info("no notice source on this provider: preemption notices are off", "cloud", f.cloud)
		return nil
	}
	client := preempt.NewClient()
	var src preempt.Source
	var err error
	if f.cloud == "auto" {
		src, err = preempt.Detect(ctx, client, f.metadata)
	} else {
		src, err = preempt.ForProvider(f.cloud, client, f.metadata)
	}
	switch {
	case errors.Is(err, preempt.ErrNoCloud):
		log.Info("no cloud metadata answers: preemption notices are off")
		return nil
	case err != nil:
		log.Warn("cloud metadata", "err", err)
		return nil
	}
	preempt.SetLogger(src, log)
	log.Info("watching for cloud notices", "cloud", src.Provider())
	return src
}
