package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/agent"
	"github.com/gpuwarden/gpuwarden/burnin"
	"github.com/spf13/cobra"
)

// fleetUpFlags are `gpuwarden up`'s settings for reporting to a server.
type fleetUpFlags struct {
	server, token, tokenFile string
	nodeID, instanceID       string
	labels                   []string
	heartbeat                time.Duration
}

func (f *fleetUpFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.server, "server", os.Getenv("GPUWARDEN_SERVER"), "report to the fleet server at `URL` (default $GPUWARDEN_SERVER)")
	fl.StringVar(&f.token, "token", "", "agent `TOKEN` for --server (default $GPUWARDEN_TOKEN; --token-file keeps it out of ps)")
	fl.StringVar(&f.tokenFile, "token-file", "", "read the agent token from `FILE`")
	fl.StringVar(&f.nodeID, "node-id", "", "the box's `ID` on the server (default: host name and GPU UUIDs, hashed; with --simulate also --data-dir, so that two simulated agents on one host are two nodes)")
	fl.StringVar(&f.instanceID, "instance-id", os.Getenv("GPUWARDEN_INSTANCE_ID"), "the machine's cloud instance `ID`, which tells the server two boxes sending one node ID apart (default $GPUWARDEN_INSTANCE_ID, else a hash of the host name, /etc/machine-id and --data-dir)")
	fl.StringSliceVar(&f.labels, "label", nil, "`KEY=VALUE` labels: owner, provider, region, instance_type, price, currency, spot, ttl, launched_at, "+gpuwarden.LabelReplaces+" (the node this box right-sizes), or any other; repeatable")
	fl.DurationVar(&f.heartbeat, "heartbeat", 15*time.Second, "time between heartbeats to --server")
}

// shipper builds the fleet reporter from the flags: the client, and the
// node as upNode read it.
func (a *app) shipper(f *upFlags, node gpuwarden.Node, ledger gpuwarden.Ledger, ag *agent.Agent) (*agent.Shipper, error) {
	if f.fleet.heartbeat < time.Second {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--heartbeat must be at least 1s")
	}
	token, err := readToken(f.fleet.token, f.fleet.tokenFile)
	if err != nil {
		return nil, err
	}
	fl := fleetFlags{server: f.fleet.server, token: token}
	client, err := fl.client()
	if err != nil {
		return nil, err
	}
	return &agent.Shipper{Uplink: client, Ledger: ledger, Node: node, Status: ag.Status, HeartbeatEvery: f.fleet.heartbeat,
		Now: a.now, Log: a.log.With("component", "shipper")}, nil
}

// upNode is the box as the fleet server, /metrics and the alerts name it,
// read once at start so that the three agree: its labels (--label and the
// plan's), its GPUs, its ID on the server (--node-id, else derived from the
// host and GPUs and, simulated, the absolute data dir), and its instance
// and boot IDs. The GPUs are listed only for the server: an agent without
// one starts on a driver that does not answer yet.
func (a *app) upNode(ctx context.Context, f *upFlags, cfg agent.Config, gpus gpuwarden.GPUs) (gpuwarden.Node, error) {
	labels, err := parseLabels(f.fleet.labels, cfg.Budget)
	if err != nil {
		return gpuwarden.Node{}, err
	}
	labels.Simulated = f.simulate != ""
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return gpuwarden.Node{}, gpuwarden.Errorf(gpuwarden.EInvalid, "--data-dir %s: %v", f.dataDir, err)
	}
	var list []gpuwarden.GPU
	if gpus != nil && f.fleet.server != "" {
		if list, err = gpus.List(ctx); err != nil {
			return gpuwarden.Node{}, err
		}
	}
	id := f.fleet.nodeID
	switch {
	case id != "":
	case f.simulate != "":
		id = simulatedNodeID(cfg.Node, dataDir, list)
	default:
		id = burnin.NodeID(cfg.Node, list)
	}
	instance, boot := agent.NodeIdentity(cfg.Node, dataDir, f.fleet.instanceID)
	return gpuwarden.Node{ID: id, Hostname: cfg.Node, Labels: labels, GPUs: list, AgentVersion: gpuwarden.Version,
		InstanceID: instance, BootID: boot}, nil
}

// simulatedNodeID is the node ID of a simulated agent with its data dir
// (absolute): simulated GPUs of one spec have the same UUIDs everywhere, so
// the host and the GPUs alone would give every simulated agent on a host
// one ID, and the server would refuse all but the first. The data dir, one
// per agent, tells them apart and stays the same across restarts.
func simulatedNodeID(host, dataDir string, gpus []gpuwarden.GPU) string {
	return "sim-" + burnin.NodeID(host+"\nsimulated in "+dataDir, gpus)
}

// parseLabels reads --label values; the price and currency default to the
// budget's rate, so a box with a plan needs no price label.
func parseLabels(kvs []string, budget agent.BudgetConfig) (gpuwarden.NodeLabels, error) {
	l := gpuwarden.NodeLabels{HourlyPrice: budget.HourlyRate, Currency: budget.Currency}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return l, gpuwarden.Errorf(gpuwarden.EInvalid, "--label %q is not KEY=VALUE", kv)
		}
		bad := func(what string) error {
			return gpuwarden.Errorf(gpuwarden.EInvalid, "--label %s=%q: %s", k, v, what)
		}
		switch k {
		case "owner":
			l.Owner = v
		case "provider":
			l.Provider = v
		case "region":
			l.Region = v
		case "instance_type", "instance-type":
			l.InstanceType = v
		case "price":
			m, err := gpuwarden.ParseMicros(v)
			if err != nil || m < 0 {
				return l, bad("not an hourly price such as 3.50")
			}
			l.HourlyPrice = m
		case "currency":
			if len(v) != 3 {
				return l, bad("not an ISO 4217 code such as EUR")
			}
			l.Currency = gpuwarden.Currency(strings.ToUpper(v))
		case "spot":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return l, bad("not true or false")
			}
			l.Spot = b
		case "ttl":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return l, bad("not a duration such as 72h")
			}
			l.TTLSeconds = int64(d.Seconds())
		case "launched_at", "launched-at":
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return l, bad("not an RFC 3339 time such as 2026-12-01T09:00:00Z")
			}
			l.LaunchedAt = t.UTC()
		default:
			if l.Extra == nil {
				l.Extra = map[string]string{}
			}
			l.Extra[k] = v
		}
	}
	if l.Currency == "" {
		l.Currency = "USD"
	}
	return l, nil
}
