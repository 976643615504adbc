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
	fl.StringSliceVar(&f.labels, "label", nil, "`KEY=VALUE` labels: owner, provider, region, instance_type, price, currency, spot, ttl, launched_at, or any other; repeatable")
	fl.DurationVar(&f.heartbeat, "heartbeat", 15*time.Second, "time between heartbeats to --server")
}

// shipper builds the fleet reporter from the flags: the node's identity
// and labels, and the client.
func (a *app) shipper(ctx context.Context, f *upFlags, cfg agent.Config, gpus gpuwarden.GPUs, ledger gpuwarden.Ledger, ag *agent.Agent) (*agent.Shipper, error) {
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
	labels, err := parseLabels(f.fleet.labels, cfg.Budget)
	if err != nil {
		return nil, err
	}
	var list []gpuwarden.GPU
	if gpus != nil {
		if list, err = gpus.List(ctx); err != nil {
			return nil, err
		}
	}
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "--data-dir %s: %v", f.dataDir, err)
	}
	id := fleetNodeID(f, cfg.Node, dataDir, list)
	labels.Simulated = f.simulate != ""
	instance, boot := agent.NodeIdentity(cfg.Node, dataDir, f.fleet.instanceID)
	node := gpuwarden.Node{ID: id, Hostname: cfg.Node, Labels: labels, GPUs: list, AgentVersion: gpuwarden.Version,
		InstanceID: instance, BootID: boot}
	return &agent.Shipper{Uplink: client, Ledger: ledger, Node: node, Status: ag.Status, HeartbeatEvery: f.fleet.heartbeat,
		Now: a.now, Log: a.log.With("component", "shipper")}, nil
}

// fleetNodeID is the box's ID on the fleet server: --node-id, else derived
// from the host and GPUs (and, simulated, the absolute data dir). The
// shipper registers it and the alerts link to its page.
func fleetNodeID(f *upFlags, host, dataDir string, gpus []gpuwarden.GPU) string {
	switch {
	case f.fleet.nodeID != "":
		return f.fleet.nodeID
	case f.simulate != "":
		return simulatedNodeID(host, dataDir, gpus)
	}
	return burnin.NodeID(host, gpus)
}

// metricsNode is the node as gpuwarden_node_info labels it: the --label
// values (project among them) and the instance ID the server would see, so
// that an alert on an agent's series can name who pays for the box.
func metricsNode(f *upFlags, cfg agent.Config) (gpuwarden.Node, error) {
	labels, err := parseLabels(f.fleet.labels, cfg.Budget)
	if err != nil {
		return gpuwarden.Node{}, err
	}
	dataDir, err := filepath.Abs(f.dataDir)
	if err != nil {
		return gpuwarden.Node{}, gpuwarden.Errorf(gpuwarden.EInvalid, "--data-dir %s: %v", f.dataDir, err)
	}
	instance, _ := agent.NodeIdentity(cfg.Node, dataDir, f.fleet.instanceID)
	return gpuwarden.Node{Hostname: cfg.Node, Project: labels.Extra["project"], Labels: labels, InstanceID: instance}, nil
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
