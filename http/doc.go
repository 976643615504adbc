// Package http serves one agent's local face on 127.0.0.1:7070: a JSON API
// for `gpuwarden status` and scripts, a dashboard that works without
// JavaScript, and Prometheus /metrics.
//
// The package never holds agent state of its own: every request reads the
// agent through the functions given to NewServer, so what it shows is never
// staler than the agent's last tick and nothing has to be kept in sync.
package http
