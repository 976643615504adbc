package main

import (
	"context"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/cuda"
	"github.com/gpuwarden/gpuwarden/gpusim"
	"github.com/spf13/cobra"
)

// probeCommand is the hidden child that canary and burn-in start for the
// CUDA work of one GPU; it prints one ProbeResult as JSON. Living in its own
// process, it can be killed when the driver hangs.
func (a *app) probeCommand() *cobra.Command {
	var (
		req      gpuwarden.ProbeRequest
		simulate string
	)
	c := &cobra.Command{
		Use:    "__probe",
		Short:  "Run the CUDA live checks of one GPU (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var p gpuwarden.Prober
			if simulate != "" {
				spec, err := gpusim.ParseSpec(simulate)
				if err != nil {
					return err
				}
				p = gpusim.New(spec)
			} else {
				d, err := cuda.Open()
				if err != nil {
					return err
				}
				p = d
			}
			r, err := p.Probe(context.Background(), req)
			if err != nil {
				return err
			}
			return writeJSON(a.stdout, "", r)
		},
	}
	c.Flags().IntVar(&req.Index, "index", 0, "GPU index (NVML's)")
	c.Flags().StringVar(&req.UUID, "uuid", "", "NVML UUID of the GPU; CUDA finds the device by it")
	c.Flags().Uint64Var(&req.AllocBytes, "alloc-bytes", 1<<30, "bytes to allocate and verify")
	c.Flags().Uint64Var(&req.Seed, "seed", 1, "fill pattern seed")
	c.Flags().Uint64Var(&req.VerifySeed, "verify-seed", 0, "verify against another seed (a planted fault)")
	c.Flags().StringVar(&simulate, "simulate", "", "simulated GPUs")
	return c
}
