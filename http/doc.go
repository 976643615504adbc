// Package http serves the agent's local API, dashboard and Prometheus
// /metrics over net/http.
package http

import _ "github.com/prometheus/client_golang/prometheus"
