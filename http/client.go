package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	nethttp "net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuwarden/gpuwarden"
)

// Client talks to a fleet server: agents use it as their Uplink, and the
// CLI reads reports with it.
type Client struct {
	base  *url.URL
	token string
	hc    *nethttp.Client
}

var _ gpuwarden.Uplink = (*Client)(nil)

// NewClient checks the server URL and returns a client sending token; a
// nil hc uses one with a 30-second timeout.
func NewClient(server, token string, hc *nethttp.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(server, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "server %q is not an http:// or https:// URL", server).
			WithHint("for example --server https://gpuwarden.example.com:8080")
	}
	if _, _, ok := splitToken(token); !ok {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "the token is not a gpuwarden token (gw_…)").
			WithHint("create one with `gpuwarden token create --project NAME --role agent`")
	}
	if hc == nil {
		hc = &nethttp.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: u, token: token, hc: hc}, nil
}

// Register announces the node.
func (c *Client) Register(ctx context.Context, n gpuwarden.Node) (gpuwarden.Node, error) {
	var out gpuwarden.Node
	err := c.Do(ctx, nethttp.MethodPost, "/api/v1/register", nil, n, &out)
	return out, err
}

// Heartbeat says the node is alive.
func (c *Client) Heartbeat(ctx context.Context, hb gpuwarden.Heartbeat) error {
	return c.Do(ctx, nethttp.MethodPost, "/api/v1/heartbeat", nil, hb, nil)
}

// Ship sends a batch and returns once the server committed it.
func (c *Client) Ship(ctx context.Context, node string, b gpuwarden.FleetBatch) (gpuwarden.BatchResult, error) {
	var out gpuwarden.BatchResult
	err := c.Do(ctx, nethttp.MethodPost, "/api/v1/nodes/"+url.PathEscape(node)+"/batch", nil, b, &out)
	return out, err
}

// Do sends one request with a JSON body (when in is not nil) and decodes
// the JSON answer into out (when not nil). A server error comes back as a
// gpuwarden.Error with the server's code, message and hint; a server that
// cannot be reached is EEnvironment.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := nethttp.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return &gpuwarden.Error{Code: gpuwarden.EEnvironment, Message: "reach the server " + c.base.Redacted(), Err: err,
			Hint: "check --server and that `gpuwarden server` runs there"}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return &gpuwarden.Error{Code: gpuwarden.EEnvironment, Message: fmt.Sprintf("%s %s: read the answer", method, path), Err: err}
	}
	if resp.StatusCode >= 300 {
		return answerError(resp.StatusCode, raw)
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode the answer: %w", method, path, err)
	}
	return nil
}

// answerError turns the server's JSON error back into the error it was.
func answerError(status int, raw []byte) error {
	var b errorBody
	if err := json.Unmarshal(raw, &b); err != nil || b.Error == "" {
		return gpuwarden.Errorf(codeOfStatus(status), "server answered %d: %.200s", status, strings.TrimSpace(string(raw)))
	}
	code := gpuwarden.ErrorCode(b.Code)
	if code == "" {
		code = codeOfStatus(status)
	}
	return &gpuwarden.Error{Code: code, Message: b.Error, Hint: b.Hint}
}

func codeOfStatus(status int) gpuwarden.ErrorCode {
	switch {
	case status == nethttp.StatusUnauthorized:
		return gpuwarden.EUnauthorized
	case status == nethttp.StatusForbidden:
		return gpuwarden.EForbidden
	case status == nethttp.StatusNotFound:
		return gpuwarden.ENotFound
	case status == nethttp.StatusConflict:
		return gpuwarden.EConflict
	case status == nethttp.StatusServiceUnavailable:
		return gpuwarden.EUnavailable
	case status >= 500:
		return gpuwarden.EInternal
	}
	return gpuwarden.EInvalid
}
