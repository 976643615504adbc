// Package fleetrow holds the database-free half of the SQLite and PostgreSQL
// fleet ledgers: the rows as stored, their encodings, the checks every write
// makes, the SQL both databases share, and the arithmetic that turns new
// minutes into node hours. Keeping it here holds both ledgers to one
// behaviour; what differs between them is only how a statement travels.
package fleetrow

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuwarden/gpuwarden"
	"github.com/gpuwarden/gpuwarden/internal/ledgerrow"
)

const (
	minuteMs = int64(time.Minute / time.Millisecond)
	hourMs   = int64(time.Hour / time.Millisecond)
)

// Ms is t in Unix milliseconds, 0 for the zero time, so that a zero time
// read back is zero again rather than 1970.
func Ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// Time is the UTC time of ms, the zero time for 0.
func Time(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// NullTime is the time of a nullable column, the zero time for NULL.
func NullTime(ms sql.NullInt64) time.Time {
	if !ms.Valid {
		return time.Time{}
	}
	return Time(ms.Int64)
}

// floor is the start of the period of length d (ms) that holds ms, also for
// times before 1970.
func floor(ms, d int64) int64 {
	f := ms / d * d
	if f > ms {
		f -= d
	}
	return f
}

// FloorHour is the start of the clock hour holding ms.
func FloorHour(ms int64) int64 { return floor(ms, hourMs) }

// Cost is what an hour costs given the sum of the node's hourly price over
// its minutes, divided by 60 and rounded half away from zero once, so that
// an hour at a steady price costs exactly that price and no remainder is
// lost minute by minute.
func Cost(priceMinutes int64) gpuwarden.Micros {
	q, r := priceMinutes/60, priceMinutes%60
	switch {
	case r >= 30:
		q++
	case r <= -30:
		q--
	}
	return gpuwarden.Micros(q)
}

// Text reports whether s can be stored in, and compared with, a TEXT
// column of both databases: PostgreSQL refuses NUL and invalid UTF-8 with
// an error where SQLite would store the bytes, so every write refuses them
// up front (an invalid input on both) and every lookup by such a key finds
// nothing, as it would on SQLite.
func Text(s ...string) bool {
	for _, v := range s {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return false
		}
	}
	return true
}

// ---- projects ----

// ProjectCols are the columns of projects in the order of ProjectRow.Dest.
const ProjectCols = "name, budget_cents, currency, created_ms"

// UpsertProjectSQL creates a project or updates its budget, keeping the time
// it was created.
const UpsertProjectSQL = `INSERT INTO projects (` + ProjectCols + `) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET budget_cents = excluded.budget_cents, currency = excluded.currency`

// ProjectArgs checks p and returns UpsertProjectSQL's arguments.
func ProjectArgs(p gpuwarden.Project) ([]any, error) {
	if p.Name == "" {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "put project: no name")
	}
	if p.Name == gpuwarden.AllProjects {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "put project: %q names every project, not one", p.Name)
	}
	if !Text(p.Name, string(p.Currency)) {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "put project %q: the name and currency must be UTF-8 without NUL", p.Name)
	}
	return []any{p.Name, int64(p.Budget), string(p.Currency), Ms(p.Created)}, nil
}

// ProjectRow is a row of projects as stored.
type ProjectRow struct {
	Name, Currency  string
	Budget, Created int64
}

// Dest is the scan destinations of ProjectCols.
func (r *ProjectRow) Dest() []any { return []any{&r.Name, &r.Budget, &r.Currency, &r.Created} }

// Project is the row as a Project.
func (r *ProjectRow) Project() gpuwarden.Project {
	return gpuwarden.Project{Name: r.Name, Budget: gpuwarden.Cents(r.Budget),
		Currency: gpuwarden.Currency(r.Currency), Created: Time(r.Created)}
}

// ---- tokens ----

// TokenCols are the columns of tokens in the order of TokenRow.Dest.
const TokenCols = "id, project, role, name, hash, created_ms, revoked_ms"

// InsertTokenSQL stores a new token; a taken ID inserts nothing, which the
// caller reports as a conflict without parsing database errors.
const InsertTokenSQL = `INSERT INTO tokens (` + TokenCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (id) DO NOTHING`

// RevokeTokenSQL sets the revocation time unless one is set: the first
// revocation is the one that counts.
const RevokeTokenSQL = `UPDATE tokens SET revoked_ms = COALESCE(revoked_ms, $2) WHERE id = $1`

// TokenArgs checks t and returns InsertTokenSQL's arguments.
func TokenArgs(t gpuwarden.Token) ([]any, error) {
	if t.ID == "" {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "create token: no id")
	}
	if t.Project == "" {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "create token %s: no project", t.ID)
	}
	if !Text(t.ID, t.Project, t.Role, t.Name) {
		return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "create token %q: its fields must be UTF-8 without NUL", t.ID)
	}
	var hash, revoked any
	if len(t.Hash) > 0 {
		hash = t.Hash
	}
	if !t.Revoked.IsZero() {
		revoked = t.Revoked.UnixMilli()
	}
	return []any{t.ID, t.Project, t.Role, t.Name, hash, Ms(t.Created), revoked}, nil
}

// TokenRow is a row of tokens as stored.
type TokenRow struct {
	ID, Project, Role, Name string
	Hash                    []byte
	Created                 int64
	Revoked                 sql.NullInt64
}

// Dest is the scan destinations of TokenCols.
func (r *TokenRow) Dest() []any {
	return []any{&r.ID, &r.Project, &r.Role, &r.Name, &r.Hash, &r.Created, &r.Revoked}
}

// Token is the row as a Token; an empty hash reads as nil on both databases.
func (r *TokenRow) Token() gpuwarden.Token {
	t := gpuwarden.Token{ID: r.ID, Project: r.Project, Role: r.Role, Name: r.Name,
		Created: Time(r.Created), Revoked: NullTime(r.Revoked)}
	if len(r.Hash) > 0 {
		t.Hash = append([]byte(nil), r.Hash...)
	}
	return t
}

// ---- nodes ----

// NodeCols are the columns of nodes in the order of NodeRow.Dest.
const NodeCols = "id, project, hostname, labels, gpus, agent_version, token_id, registered_ms, last_seen_ms, live, instance_id, boot_id"

// InsertNodeSQL registers a new node; an existing one inserts nothing and
// the caller goes on to the checks of a re-registration.
const InsertNodeSQL = `INSERT INTO nodes (id, project, hostname, owner, provider, region,
    hourly_price_micros, currency, labels, gpus, agent_version, token_id, registered_ms, instance_id, boot_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (id) DO NOTHING`

// UpdateNodeSQL re-registers a node: what the box says about itself, its
// identity and the token that now writes it, keeping its project,
// registration time and last heartbeat.
const UpdateNodeSQL = `UPDATE nodes SET hostname = $2, owner = $3, provider = $4, region = $5,
    hourly_price_micros = $6, currency = $7, labels = $8, gpus = $9, agent_version = $10, token_id = $11,
    instance_id = $12, boot_id = $13
WHERE id = $1`

// NodeOwnerSQL reads who holds a node and when it was last heard from, for
// the re-registration checks; its columns are NodeHolder.Dest's.
const NodeOwnerSQL = `SELECT project, token_id, hostname, instance_id, registered_ms, last_seen_ms, live FROM nodes WHERE id = $1`

// TokenRevokedSQL reads whether the token holding a node is revoked.
const TokenRevokedSQL = `SELECT revoked_ms FROM tokens WHERE id = $1`

// NodeArgs is a node encoded for InsertNodeSQL and UpdateNodeSQL.
type NodeArgs struct {
	n              gpuwarden.Node
	labels         string
	gpus           any
	registeredTime int64
}

// EncodeNode checks n and encodes its JSON columns. Times inside the labels
// are stored in UTC so that every reader gets the same value back.
func EncodeNode(n gpuwarden.Node) (NodeArgs, error) {
	if n.ID == "" {
		return NodeArgs{}, gpuwarden.Errorf(gpuwarden.EInvalid, "register node: no id")
	}
	if n.Project == "" || n.Project == gpuwarden.AllProjects {
		return NodeArgs{}, gpuwarden.Errorf(gpuwarden.EInvalid, "register node %s: no project", n.ID)
	}
	labels := n.Labels
	if !Text(n.ID, n.Project, n.Hostname, n.AgentVersion, n.TokenID, labels.Owner, labels.Provider, labels.Region, string(labels.Currency),
		n.InstanceID, n.BootID) {
		return NodeArgs{}, gpuwarden.Errorf(gpuwarden.EInvalid, "register node %q: its names and labels must be UTF-8 without NUL", n.ID)
	}
	if !labels.LaunchedAt.IsZero() {
		labels.LaunchedAt = labels.LaunchedAt.UTC()
	}
	lb, err := json.Marshal(labels)
	if err != nil {
		return NodeArgs{}, gpuwarden.Errorf(gpuwarden.EInvalid, "register node %s: labels: %v", n.ID, err)
	}
	gpus, err := ledgerrow.JSONText(n.GPUs, len(n.GPUs) == 0)
	if err != nil {
		return NodeArgs{}, gpuwarden.Errorf(gpuwarden.EInvalid, "register node %s: gpus: %v", n.ID, err)
	}
	return NodeArgs{n: n, labels: string(lb), gpus: gpus, registeredTime: Ms(n.Registered)}, nil
}

// Insert is InsertNodeSQL's arguments.
func (a NodeArgs) Insert() []any {
	l := a.n.Labels
	return []any{a.n.ID, a.n.Project, a.n.Hostname, l.Owner, l.Provider, l.Region,
		int64(l.HourlyPrice), string(l.Currency), a.labels, a.gpus, a.n.AgentVersion, a.n.TokenID, a.registeredTime,
		a.n.InstanceID, a.n.BootID}
}

// Update is UpdateNodeSQL's arguments.
func (a NodeArgs) Update() []any {
	l := a.n.Labels
	return []any{a.n.ID, a.n.Hostname, l.Owner, l.Provider, l.Region,
		int64(l.HourlyPrice), string(l.Currency), a.labels, a.gpus, a.n.AgentVersion, a.n.TokenID,
		a.n.InstanceID, a.n.BootID}
}

// NodeHolder is the stored node a re-registration is checked against: who
// holds it, which instance it is, and when it was last heard from.
type NodeHolder struct {
	Project, TokenID, Hostname, InstanceID string
	Registered                             int64
	LastSeen                               sql.NullInt64
	Live                                   sql.NullString
}

// Dest is the scan destinations of NodeOwnerSQL's columns.
func (h *NodeHolder) Dest() []any {
	return []any{&h.Project, &h.TokenID, &h.Hostname, &h.InstanceID, &h.Registered, &h.LastSeen, &h.Live}
}

// heard is when the holder was last heard from: its last heartbeat, or its
// registration before the first one, so that a box that registered a
// moment ago holds its ID before its first heartbeat.
func (h NodeHolder) heard() time.Time {
	if h.LastSeen.Valid {
		return Time(h.LastSeen.Int64)
	}
	return Time(h.Registered)
}

// stopped reports whether the holder's last heartbeat said its agent
// stopped: a box that shut down on purpose hands its ID on at once,
// whether or not its stop ended the bill (stopped, stop-requested,
// powered-off-still-billing: its agent no longer runs either way), as does
// an agent stopped on its own (agent-stopped) and a node a person marked
// gone: no agent of theirs sends under the ID any more.
func (h NodeHolder) stopped() bool {
	var hb gpuwarden.Heartbeat
	if !h.Live.Valid || json.Unmarshal([]byte(h.Live.String), &hb) != nil {
		return false
	}
	switch hb.State {
	case gpuwarden.NodeStopped, gpuwarden.NodeStopRequested, gpuwarden.NodePoweredOffStillBilling, gpuwarden.NodeAgentStopped,
		gpuwarden.NodeGone:
		return true
	}
	return false
}

// CheckRegister decides a re-registration of n against the stored holder;
// holderValid says whether the holder's token exists unrevoked. A token
// that is revoked, or unknown, can no longer write, so the node passes to
// the new token rather than being orphaned. A live holder (see
// gpuwarden.Node.LiveSince) keeps its ID against another instance: two
// boxes sending one ID would otherwise merge into one node. An unknown
// instance on either side ("": an older agent) is not compared, and the
// same instance with a new boot ID is the box after a reboot.
func CheckRegister(n gpuwarden.Node, h NodeHolder, holderValid bool) error {
	if h.Project != n.Project {
		// Node IDs are fleet-wide, so the ID must be refused; the answer
		// says only that it is taken, never whose it is or what box holds
		// it, and every read or write by ID answers another project's
		// node as one nobody holds (404).
		return gpuwarden.Errorf(gpuwarden.EConflict, "register node %s: the ID is taken", n.ID).
			WithHint("node IDs are unique across the fleet: give this box one of its own with gpuwarden up --node-id ID")
	}
	sameToken := h.TokenID == n.TokenID
	if !sameToken && holderValid {
		return gpuwarden.Errorf(gpuwarden.EConflict, "register node %s: another token registered it", n.ID).
			WithHint("revoke token %s to hand the node over", h.TokenID)
	}
	if n.InstanceID == "" || h.InstanceID == "" || n.InstanceID == h.InstanceID {
		return nil
	}
	// Here the holder's token is the caller's or no longer valid.
	heard := h.heard()
	if !sameToken || h.stopped() || heard.Before(n.LiveSince) {
		return nil
	}
	ago := "just now"
	if d := n.Registered.Sub(heard).Round(time.Second); d > 0 && !n.Registered.IsZero() {
		ago = d.String() + " ago"
	}
	return gpuwarden.Errorf(gpuwarden.EConflict,
		"register node %s: another box (host %q, instance %s) holds this node ID and was heard from %s", n.ID, h.Hostname, h.InstanceID, ago).
		WithHint("two boxes send node ID %s: start this one with `gpuwarden up --node-id ID` (an ID of its own), or stop the other; "+
			"once the other has been silent for the server's --lost-after, a new box takes the ID over", n.ID)
}

// NodeRow is a row of nodes as stored.
type NodeRow struct {
	ID, Project, Hostname, Labels, AgentVersion, TokenID string
	GPUs, Live                                           sql.NullString
	Registered                                           int64
	LastSeen                                             sql.NullInt64
	InstanceID, BootID                                   string
}

// Dest is the scan destinations of NodeCols.
func (r *NodeRow) Dest() []any {
	return []any{&r.ID, &r.Project, &r.Hostname, &r.Labels, &r.GPUs, &r.AgentVersion,
		&r.TokenID, &r.Registered, &r.LastSeen, &r.Live, &r.InstanceID, &r.BootID}
}

// Node is the row as a Node.
func (r *NodeRow) Node() (gpuwarden.Node, error) {
	n := gpuwarden.Node{ID: r.ID, Project: r.Project, Hostname: r.Hostname,
		AgentVersion: r.AgentVersion, TokenID: r.TokenID,
		Registered: Time(r.Registered), LastSeen: NullTime(r.LastSeen),
		InstanceID: r.InstanceID, BootID: r.BootID}
	if err := json.Unmarshal([]byte(r.Labels), &n.Labels); err != nil {
		return n, fmt.Errorf("node %s: labels: %w", r.ID, err)
	}
	if err := ledgerrow.Decode(r.GPUs, &n.GPUs); err != nil {
		return n, fmt.Errorf("node %s: gpus: %w", r.ID, err)
	}
	if err := ledgerrow.Decode(r.Live, &n.Live); err != nil {
		return n, fmt.Errorf("node %s: live: %w", r.ID, err)
	}
	return n, nil
}

// ListSQL is a SELECT of cols from table ordered by key, for one project or,
// with AllProjects, for all; args are its arguments.
func ListSQL(cols, table, key, project string) (query string, args []any) {
	query = "SELECT " + cols + " FROM " + table
	if project != gpuwarden.AllProjects {
		query += " WHERE project = $1"
		args = []any{project}
	}
	return query + " ORDER BY " + key, args
}

// ---- heartbeats ----

// HeartbeatSQL stores one node's heartbeat; an unknown node updates nothing.
const HeartbeatSQL = `UPDATE nodes SET last_seen_ms = $2, live = $3 WHERE id = $1`

// Heartbeats are the last heartbeat of each node in a batch, ordered by
// node ID so that concurrent batches lock rows in one order; the later in
// the slice wins, as if the heartbeats were stored one by one.
func Heartbeats(hbs []gpuwarden.Heartbeat) (ids, lives []string, err error) {
	last := make(map[string]int, len(hbs))
	for i, hb := range hbs {
		// A node ID that is not Text names no stored node: skipped, as
		// an unknown node is, rather than failing the batch on PostgreSQL.
		if hb.Node != "" && Text(hb.Node) {
			last[hb.Node] = i
		}
	}
	ids = make([]string, 0, len(last))
	for id := range last {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	lives = make([]string, len(ids))
	for i, id := range ids {
		hb := hbs[last[id]]
		// UTC, so that Live reads back the same from either database.
		if !hb.Time.IsZero() {
			hb.Time = hb.Time.UTC()
		}
		if !hb.IdleSince.IsZero() {
			hb.IdleSince = hb.IdleSince.UTC()
		}
		hb.Stop = stopUTC(hb.Stop)
		b, err := json.Marshal(hb)
		if err != nil {
			return nil, nil, gpuwarden.Errorf(gpuwarden.EInvalid, "record heartbeats: node %s: %v", id, err)
		}
		lives[i] = string(b)
	}
	return ids, lives, nil
}

// stopUTC is a copy of a heartbeat's stop report with its times in UTC,
// so that it reads back the same from either database; the caller's
// report is left as it was.
func stopUTC(r *gpuwarden.StopReport) *gpuwarden.StopReport {
	if r == nil {
		return nil
	}
	c := *r
	if p := r.Proof; p != nil {
		pc := *p
		if !pc.At.IsZero() {
			pc.At = pc.At.UTC()
		}
		c.Proof = &pc
	}
	if o := r.Outcome; o != nil {
		oc := *o
		if !oc.At.IsZero() {
			oc.At = oc.At.UTC()
		}
		c.Outcome = &oc
	}
	return &c
}

// ---- ingest ----

// MinuteRow is a NodeMinute checked: its minute's start, and its figures
// made finite. A minute is not stored as a row (see MinuteSet): it is
// added to its node hour and GPU hours, and its bit set in its hour's set.
type MinuteRow struct {
	MinuteMs, Samples int64
	CPU               float64
	// GPUUtil and GPUMem are per GPU index, finite.
	GPUUtil, GPUMem []float64
}

// EventRow is an Event as stored in fleet_events.
type EventRow struct {
	Seq, TimeMs             int64
	Kind, Severity, Message string
	// Key and Data are nil for NULL.
	Key, Data any
}

// Batch is a FleetBatch checked and encoded: minutes by minute and events by
// sequence number, each once; Dups counts what the batch repeated itself.
type Batch struct {
	Minutes []MinuteRow
	Events  []EventRow
	Dups    int
}

// EncodeBatch checks b and encodes it. Minutes are keyed by the start of
// their minute; a minute or event the batch holds twice is kept once, the
// first, and counted as a duplicate. Rows come sorted by key so that
// concurrent ingests take row locks in one order.
func EncodeBatch(node string, b gpuwarden.FleetBatch) (Batch, error) {
	if !Text(node) {
		return Batch{}, gpuwarden.Errorf(gpuwarden.ENotFound, "ingest: node %q not found", node)
	}
	var out Batch
	seen := make(map[int64]bool, len(b.Minutes))
	for i, m := range b.Minutes {
		if m.Minute.IsZero() {
			return Batch{}, gpuwarden.Errorf(gpuwarden.EInvalid, "ingest node %s: minute %d has no time", node, i)
		}
		ms := floor(m.Minute.UnixMilli(), minuteMs)
		if seen[ms] {
			out.Dups++
			continue
		}
		seen[ms] = true
		out.Minutes = append(out.Minutes, MinuteRow{
			MinuteMs: ms, Samples: int64(m.Samples), CPU: ledgerrow.Finite(m.CPUPercent),
			GPUUtil: finite(m.GPUUtil), GPUMem: finite(m.GPUMemPercent),
		})
	}
	clear(seen)
	for _, e := range b.Events {
		if e.Seq <= 0 {
			return Batch{}, gpuwarden.Errorf(gpuwarden.EInvalid, "ingest node %s: event %q has no sequence number", node, e.Kind).
				WithHint("ship events as EventsAfter returns them, with their Seq")
		}
		if !Text(e.Kind, e.Severity, e.Message, e.Key) {
			return Batch{}, gpuwarden.Errorf(gpuwarden.EInvalid, "ingest node %s: event %d: its kind, severity, message and key must be UTF-8 without NUL", node, e.Seq)
		}
		if seen[e.Seq] {
			out.Dups++
			continue
		}
		seen[e.Seq] = true
		data, err := ledgerrow.JSONText(e.Data, len(e.Data) == 0)
		if err != nil {
			return Batch{}, gpuwarden.Errorf(gpuwarden.EInvalid, "ingest node %s: event %d: %v", node, e.Seq, err)
		}
		var key any
		if e.Key != "" {
			key = e.Key
		}
		out.Events = append(out.Events, EventRow{Seq: e.Seq, TimeMs: e.Time.UnixMilli(),
			Kind: e.Kind, Severity: e.Severity, Message: e.Message, Key: key, Data: data})
	}
	sort.Slice(out.Minutes, func(i, j int) bool { return out.Minutes[i].MinuteMs < out.Minutes[j].MinuteMs })
	sort.Slice(out.Events, func(i, j int) bool { return out.Events[i].Seq < out.Events[j].Seq })
	return out, nil
}

// Result counts what an ingest added, given how many of the batch's minutes
// and events were new.
func (b Batch) Result(newMinutes, newEvents int) gpuwarden.BatchResult {
	return gpuwarden.BatchResult{Minutes: newMinutes, Events: newEvents,
		Duplicates: b.Dups + len(b.Minutes) - newMinutes + len(b.Events) - newEvents}
}

// NodePriceSQL reads what Ingest needs of a node: that it exists, and its
// price now.
const NodePriceSQL = `SELECT hourly_price_micros, currency FROM nodes WHERE id = $1`

// finite copies v with NaN and infinities made 0.
func finite(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, f := range v {
		out[i] = ledgerrow.Finite(f)
	}
	return out
}

// A node's minutes are kept as one row per node hour (minute_sets), a
// 60-bit set of the minutes stored, rather than one row per minute: the
// set is all a replay's dedup needs, and the figures go into the hour's
// sums (node_hours, gpu_hours), which is all any read uses. A row per
// minute cost 270 KB per node-day on SQLite (BenchmarkStorageGrowth).
const (
	// MinuteSetSQL reads the set of one node hour.
	MinuteSetSQL = `SELECT bits FROM minute_sets WHERE node_id = $1 AND hour_ms = $2`
	// MinuteSetInsert is the head of an insert into minute_sets.
	MinuteSetInsert = `INSERT INTO minute_sets (node_id, hour_ms, bits)`
	// MinuteSetConflict adds minutes to a stored set.
	MinuteSetConflict = ` ON CONFLICT (node_id, hour_ms) DO UPDATE SET bits = minute_sets.bits | excluded.bits`
	// UpsertMinuteSetSQL adds minutes to one node hour's set.
	UpsertMinuteSetSQL = MinuteSetInsert + "\nVALUES ($1, $2, $3)" + MinuteSetConflict
)

// MinuteSet is one node hour's minutes, bit i for minute i of the hour.
type MinuteSet struct {
	HourMs, Bits int64
}

// minuteBit is the hour of a minute's start and the minute's bit in it.
func minuteBit(ms int64) (hour, bit int64) {
	hour = FloorHour(ms)
	return hour, 1 << ((ms - hour) / minuteMs)
}

// SetHours are the hours the minutes (sorted by time) fall in, in order.
func SetHours(minutes []MinuteRow) []int64 {
	var out []int64
	for _, m := range minutes {
		if h := FloorHour(m.MinuteMs); len(out) == 0 || out[len(out)-1] != h {
			out = append(out, h)
		}
	}
	return out
}

// Fresh picks the minutes (sorted by time) whose bit is not in their
// hour's stored set, and returns them with the bits they add per hour,
// sorted by hour; stored maps an hour to its set, absent for none.
func Fresh(minutes []MinuteRow, stored map[int64]int64) ([]MinuteRow, []MinuteSet) {
	var fresh []MinuteRow
	var sets []MinuteSet
	for _, m := range minutes {
		h, bit := minuteBit(m.MinuteMs)
		if stored[h]&bit != 0 {
			continue
		}
		fresh = append(fresh, m)
		if len(sets) == 0 || sets[len(sets)-1].HourMs != h {
			sets = append(sets, MinuteSet{HourMs: h})
		}
		sets[len(sets)-1].Bits |= bit
	}
	return fresh, sets
}

// InsertEventSQL stores an event unless the node's sequence number is taken.
const InsertEventSQL = `INSERT INTO fleet_events (node_id, seq, time_ms, kind, severity, message, dedup_key, data)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (node_id, seq) DO NOTHING`

// Node hours and their GPUs are written as INSERT INTO + columns + rows +
// conflict clause, so that PostgreSQL can send many rows in one statement
// and SQLite one row per prepared call, with the same adding.
const (
	// HourInsert is the head of an insert into node_hours.
	HourInsert = `INSERT INTO node_hours (node_id, hour_ms, minutes, price_minutes, currency, samples, cpu_sum)`
	// HourConflict adds the new minutes to a stored hour; the currency is
	// the node's at the latest minute.
	HourConflict = ` ON CONFLICT (node_id, hour_ms) DO UPDATE SET
    minutes = node_hours.minutes + excluded.minutes,
    price_minutes = node_hours.price_minutes + excluded.price_minutes,
    currency = excluded.currency,
    samples = node_hours.samples + excluded.samples,
    cpu_sum = node_hours.cpu_sum + excluded.cpu_sum`
	// GPUHourInsert is the head of an insert into gpu_hours.
	GPUHourInsert = `INSERT INTO gpu_hours (node_id, hour_ms, gpu, minutes, util_sum, mem_sum)`
	// GPUHourConflict adds the new minutes of a GPU to a stored hour.
	GPUHourConflict = ` ON CONFLICT (node_id, hour_ms, gpu) DO UPDATE SET
    minutes = gpu_hours.minutes + excluded.minutes,
    util_sum = gpu_hours.util_sum + excluded.util_sum,
    mem_sum = gpu_hours.mem_sum + excluded.mem_sum`
)

// UpsertHourSQL adds one row of minutes to a node hour.
const UpsertHourSQL = HourInsert + "\nVALUES ($1, $2, $3, $4, $5, $6, $7)" + HourConflict

// UpsertGPUHourSQL adds one row of minutes of one GPU to a node hour.
const UpsertGPUHourSQL = GPUHourInsert + "\nVALUES ($1, $2, $3, $4, $5, $6)" + GPUHourConflict

// HourRow is what new minutes add to one node hour; Samples and CPUSum
// are the sums of the minutes' sample counts and CPU percentages.
type HourRow struct {
	HourMs, Minutes, PriceMinutes int64
	Currency                      string
	Samples                       int64
	CPUSum                        float64
}

// GPUHourRow is what new minutes add to one GPU's node hour: the minutes
// with a utilisation for it, and the sums of it and of the memory use
// (the latter where the minute gave one).
type GPUHourRow struct {
	HourMs, GPU, Minutes int64
	UtilSum, MemSum      float64
}

// Hours sums new minutes, sorted by time, into their hours, each minute
// priced at price: the rows to add, sorted by hour (and GPU).
func Hours(newMinutes []MinuteRow, price gpuwarden.Micros, currency gpuwarden.Currency) ([]HourRow, []GPUHourRow) {
	var hours []HourRow
	var gpus []GPUHourRow
	start := 0 // the first of the current hour's GPU rows
	for _, m := range newMinutes {
		h := FloorHour(m.MinuteMs)
		if len(hours) == 0 || hours[len(hours)-1].HourMs != h {
			hours = append(hours, HourRow{HourMs: h, Currency: string(currency)})
			start = len(gpus)
		}
		hr := &hours[len(hours)-1]
		hr.Minutes++
		hr.PriceMinutes += int64(price)
		hr.Samples += m.Samples
		hr.CPUSum += m.CPU
		for g, u := range m.GPUUtil {
			for len(gpus)-start <= g {
				gpus = append(gpus, GPUHourRow{HourMs: h, GPU: int64(len(gpus) - start)})
			}
			gpus[start+g].Minutes++
			gpus[start+g].UtilSum += u
			if g < len(m.GPUMem) {
				gpus[start+g].MemSum += m.GPUMem[g]
			}
		}
	}
	return hours, gpus
}

// ---- reads ----

// HoursSQL reads the node hours in [from, to) of a project (or
// AllProjects), each with its GPUs, ordered by node, hour and GPU.
func HoursSQL(project string, from, to time.Time) (query string, args []any) {
	query = `SELECT h.node_id, h.hour_ms, h.minutes, h.price_minutes, h.currency, g.gpu, g.minutes, g.util_sum
FROM node_hours h`
	args = []any{from.UnixMilli(), to.UnixMilli()}
	if project != gpuwarden.AllProjects {
		query += ` JOIN nodes n ON n.id = h.node_id AND n.project = $3`
		args = append(args, project)
	}
	return query + `
LEFT JOIN gpu_hours g ON g.node_id = h.node_id AND g.hour_ms = h.hour_ms
WHERE h.hour_ms >= $1 AND h.hour_ms < $2
ORDER BY h.node_id, h.hour_ms, g.gpu`, args
}

// HourScan is one row of HoursSQL.
type HourScan struct {
	Node                          string
	HourMs, Minutes, PriceMinutes int64
	Currency                      string
	GPU, GPUMinutes               sql.NullInt64
	UtilSum                       sql.NullFloat64
}

// Dest is the scan destinations of HoursSQL's columns.
func (r *HourScan) Dest() []any {
	return []any{&r.Node, &r.HourMs, &r.Minutes, &r.PriceMinutes, &r.Currency, &r.GPU, &r.GPUMinutes, &r.UtilSum}
}

// AddHour folds one row of HoursSQL into out: a new node hour, or one more
// GPU of the last. GPUUtil is each GPU's mean utilisation over the minutes
// it reported; a GPU index with no row reads 0.
func AddHour(out []gpuwarden.NodeHour, r HourScan) []gpuwarden.NodeHour {
	t := Time(r.HourMs)
	if n := len(out); n == 0 || out[n-1].Node != r.Node || !out[n-1].Hour.Equal(t) {
		out = append(out, gpuwarden.NodeHour{Node: r.Node, Hour: t, Minutes: int(r.Minutes),
			Cost: Cost(r.PriceMinutes), Currency: gpuwarden.Currency(r.Currency)})
	}
	h := &out[len(out)-1]
	if r.GPU.Valid && r.GPU.Int64 >= 0 && r.GPUMinutes.Int64 > 0 {
		for int64(len(h.GPUUtil)) <= r.GPU.Int64 {
			h.GPUUtil = append(h.GPUUtil, 0)
		}
		h.GPUUtil[r.GPU.Int64] = r.UtilSum.Float64 / float64(r.GPUMinutes.Int64)
	}
	return out
}

// EventsSQL selects the fleet events q asks for, newest first; within a
// millisecond by node, then the later recorded first.
func EventsSQL(q gpuwarden.EventQuery) (query string, args []any) {
	var b strings.Builder
	b.WriteString(`SELECT e.node_id, e.seq, e.time_ms, e.kind, e.severity, e.message, e.dedup_key, e.data
FROM fleet_events e`)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	var where []string
	if q.Project != "" && q.Project != gpuwarden.AllProjects {
		b.WriteString(" JOIN nodes n ON n.id = e.node_id")
		where = append(where, "n.project = "+arg(q.Project))
	}
	if q.Node != "" {
		where = append(where, "e.node_id = "+arg(q.Node))
	}
	if len(q.Kinds) > 0 {
		ps := make([]string, len(q.Kinds))
		for i, k := range q.Kinds {
			ps[i] = arg(k)
		}
		where = append(where, "e.kind IN ("+strings.Join(ps, ", ")+")")
	}
	if !q.Since.IsZero() {
		where = append(where, "e.time_ms >= "+arg(q.Since.UnixMilli()))
	}
	if len(where) > 0 {
		b.WriteString("\nWHERE " + strings.Join(where, " AND "))
	}
	b.WriteString("\nORDER BY e.time_ms DESC, e.node_id, e.seq DESC")
	if q.Limit > 0 {
		b.WriteString(" LIMIT " + arg(int64(q.Limit)))
	}
	return b.String(), args
}

// EventScan is one row of EventsSQL.
type EventScan struct {
	Node                    string
	Seq, TimeMs             int64
	Kind, Severity, Message string
	Key, Data               sql.NullString
}

// Dest is the scan destinations of EventsSQL's columns.
func (r *EventScan) Dest() []any {
	return []any{&r.Node, &r.Seq, &r.TimeMs, &r.Kind, &r.Severity, &r.Message, &r.Key, &r.Data}
}

// NodeEvent is the row as a NodeEvent.
func (r *EventScan) NodeEvent() (gpuwarden.NodeEvent, error) {
	e := gpuwarden.NodeEvent{Node: r.Node, Event: gpuwarden.Event{Time: time.UnixMilli(r.TimeMs).UTC(),
		Kind: r.Kind, Severity: r.Severity, Message: r.Message, Key: r.Key.String, Seq: r.Seq}}
	if err := ledgerrow.Decode(r.Data, &e.Data); err != nil {
		return e, fmt.Errorf("event %d of node %s: data: %w", r.Seq, r.Node, err)
	}
	return e, nil
}

// ---- retention ----

// Cutoff is a retention delete: rows of Table whose Column is before Before.
type Cutoff struct {
	Table, Column string
	Before        int64
}

// Cutoffs are the deletes Retain makes at now.
func Cutoffs(now time.Time) []Cutoff {
	minutes := now.Add(-gpuwarden.FleetMinuteRetention).UnixMilli()
	hours := now.Add(-gpuwarden.FleetHourRetention).UnixMilli()
	return []Cutoff{
		// A set goes once its whole hour is past the minutes' window.
		{"minute_sets", "hour_ms", FloorHour(minutes)},
		{"node_hours", "hour_ms", hours},
		{"gpu_hours", "hour_ms", hours},
		{"fleet_events", "time_ms", hours},
	}
}
