package config

import (
	"bytes"
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/template"

	"github.com/gpuwarden/gpuwarden"
)

// Starter holds the few answers a starter plan file is written from; the
// rest of the file is comments and commented-out examples.
type Starter struct {
	// Name labels the plan in reports; empty leaves it commented out.
	Name string
	// Kind is the workload kind, one of gpuwarden.WorkloadKinds.
	Kind gpuwarden.WorkloadKind
	// ParamsB is the model size in billions of parameters; 0 leaves it out.
	ParamsB float64
	// Precision is how weights are stored; empty leaves the kind's default.
	Precision gpuwarden.Precision
	// WorkHours is the hours of real work per month.
	WorkHours float64
	// IdleMinutes is the auto-shutdown idle timer; 0 leaves the box on.
	IdleMinutes float64
	// BudgetLimit is the monthly limit in Currency; 0 means no limit.
	BudgetLimit gpuwarden.Micros
	// Currency is the budget's ISO 4217 code; empty leaves the default, USD.
	Currency gpuwarden.Currency
	// Countries limits where the work may run; empty means anywhere.
	Countries []string
}

// DefaultStarter is the plan `gpuwarden init` writes without flags: a 7B QLoRA
// fine-tune, the most common first rental, at 120 working hours a month with
// a 30-minute auto-shutdown and a 500 USD budget.
func DefaultStarter() Starter {
	return Starter{
		Name:        "finetune-7b-qlora",
		Kind:        gpuwarden.KindFinetuneQLoRA,
		ParamsB:     7,
		Precision:   gpuwarden.NF4,
		WorkHours:   120,
		IdleMinutes: 30,
		BudgetLimit: 500 * gpuwarden.MicrosPerUnit,
		Currency:    "USD",
	}
}

// Render writes the starter as a commented gpuwarden.yaml. It does not check
// the answers: a caller that takes them from flags parses the result to
// report bad ones with the same messages as a hand-edited file.
func (s Starter) Render() []byte {
	var b bytes.Buffer
	if err := starterTemplate.Execute(&b, s); err != nil {
		// The template and its functions are fixed and cannot fail on any
		// Starter; an error here is a bug that the golden test catches.
		panic("config: starter template: " + err.Error())
	}
	return b.Bytes()
}

var starterTemplate = template.Must(template.New("gpuwarden.yaml").Funcs(template.FuncMap{
	"str":        yamlString,
	"num":        yamlNumber,
	"flow":       yamlFlowList,
	"kinds":      func() string { return joinStrings(gpuwarden.WorkloadKinds) },
	"precisions": func() string { return joinStrings(gpuwarden.Precisions) },
}).Parse(starterText))

// The starter file. Every section starts with a one-line comment saying what
// it is and its units; settings the Starter does not hold are shown
// commented out with an example value, so the file documents the format.
const starterText = `# gpuwarden.yaml: the GPU rental plan that gpuwarden prices and guards; keep it
# beside the code it runs. Commented-out settings show an example value: delete
# the "# " in front of one to use it. Sizes are in GB, money in the budget currency.

# name: a label for reports and alerts.
{{if .Name}}name: {{str .Name}}{{else}}# name: my-plan{{end}}

# workload: the job the GPU must hold in memory; sizing picks GPUs from it.
workload:
  # kind: one of {{kinds}}.
  kind: {{str .Kind}}
  # params_b: model size in billions of parameters (7 for a 7B model).
  {{if .ParamsB}}params_b: {{num .ParamsB}}{{else}}# params_b: 7{{end}}
  # precision: how weights are stored: {{precisions}}
  # (default bf16; nf4 for finetune-qlora).
  {{if .Precision}}precision: {{str .Precision}}{{else}}# precision: bf16{{end}}
  # KV cache, for inference: give all four (from the model's config.json) or none.
  # The example is Llama 3.1 8B; batch is concurrent sequences (default 1).
  # layers: 32
  # kv_heads: 8
  # head_dim: 128
  # context: 8192
  # batch: 1
  # adapter_percent: LoRA and QLoRA adapter size as % of the model (default 0.5).
  # adapter_percent: 0.5
  # optimizer: adamw (16 bytes/param) or adamw-8bit (default adamw for full fine-tunes and pretraining).
  # optimizer: adamw-8bit
  # activations_gb: activation memory in GB, replacing the rule of thumb.
  # activations_gb: 6
  # vram_gb: the GPU memory need in GB, stated outright instead of computed.
  # vram_gb: 24
  # throughput: results per working hour, to price one result (an epoch, 1k requests).
  # throughput:
  #   unit: epoch
  #   per_hour: 0.5
  #   per_hour_by_gpu:
  #     H100-SXM: 1.6
  # The work as an amount, so that plan prices the hours each card needs to finish it
  # (docs/sizing.md); give one and leave work_hours out (inference: work_hours is the hours served).
  # Training: tokens_b, or epochs × dataset_tokens_b, or samples × tokens_per_sample.
  # tokens_b: 20
  # epochs: 3
  # dataset_tokens_b: 0.5
  # samples: 200000
  # tokens_per_sample: 1024
  # Inference: requests_per_second with prompt_tokens and output_tokens, or tokens_per_second.
  # requests_per_second: 5
  # prompt_tokens: 512
  # output_tokens: 256
  # tokens_per_second: 2000
  # p95_latency_s: 10
  # Render: frames × seconds_per_frame timed on reference_gpu.
  # frames: 2400
  # seconds_per_frame: 90
  # reference_gpu: RTX-4090
  # mfu: share of the dense peak the job reaches (default per kind, docs/sizing.md).
  # mfu: 0.4

# work_hours: hours per month the GPU is busy on real work, on whatever card (speed ignored).
work_hours: {{num .WorkHours}}
# deadline: with an amount of work, leave out boxes that cannot finish in time (72h, 10d, 2w).
# deadline: 72h
# hours_per_month: hours in a billing month (default 730 = 365 × 24 / 12; some providers bill 720).
# hours_per_month: 730

# on_hours: when the box is billed beyond the working hours.
on_hours:
  # auto_shutdown_idle_minutes: stop the box after this many idle minutes; 0 never stops it.
  auto_shutdown_idle_minutes: {{num .IdleMinutes}}
  # sessions_per_month: work sessions, each leaving one idle window on the bill (default work_hours / 8).
  # sessions_per_month: 15
  # stop_when_jobs_end: stop the box as soon as the last job of gpuwarden run has ended, without
  # the idle window (gpuwarden up --stop-when-jobs-end); work stated as an amount then bills none.
  # stop_when_jobs_end: true
  # stop: how the agent stops the box: auto (what ends this provider's bill: an OS shutdown on
  # AWS and GCP, deallocate on Azure, the pod stop on RunPod and Vast), os, api, terminate (Lambda,
  # which has no stop), or command (stop_command). See gpuwarden up --help for every provider.
  # stop: auto
  # stop_command: az vm deallocate --ids /subscriptions/…/virtualMachines/my-vm

# data: what the work moves and keeps each month, in GB.
# data:
#   storage_gb: 200                   # kept all month, running or not
#   storage_kind: block               # block (default), object or volume
#   checkpoint_gb: 30                 # the size of one checkpoint
#   checkpoint_interval_minutes: 60   # how often the job writes one
#   checkpoint_store: s3://my-bucket/ckpt?region=eu-west-1   # where run pushes them
#   egress_gb:                        # outbound data, as providers bill it
#     internet: 100
#     inter_region: 0
#     intra_region: 0

# interruptions: what a spot reclaim costs: the restart and the work since the last checkpoint.
# interruptions:
#   tolerance: checkpointed           # none, checkpointed or stateless (default from checkpoints and kind)
#   spot_interruptions_per_day: 0.5   # expected reclaims a day (default 0.5)
#   restart_minutes: 10               # from reclaim to work resumed (default 10)

# budget: the monthly spending limit in the budget currency; 0 means no limit.
budget:
  monthly_limit: {{.BudgetLimit}}
  # currency: the ISO 4217 code of the limit and of every report (default USD).
  {{if .Currency}}currency: {{str .Currency}}{{else}}# currency: USD{{end}}
  # alerts_percent: warn at these percentages of the limit (default [50, 80, 100]; [] for none).
  # alerts_percent: [50, 80, 100]

# residency: where the work and its data may run; leave it out for anywhere.
{{- if .Countries}}
residency:
  # countries: ISO 3166 alpha-2 codes; regions: provider:region, or just the region.
  countries: {{flow .Countries}}
  # regions: [aws:eu-central-1]
{{- else}}
# residency:
#   countries: [DE, FR]               # ISO 3166 alpha-2 codes
#   regions: [aws:eu-central-1]       # provider:region, or just the region
{{- end}}

# providers: preferred ones win ties; excluded ones never show.
# providers:
#   prefer: [aws]
#   exclude: [vast]

# box: what the running box costs, for the budget of "gpuwarden up": an hourly
# rate, or the catalog offer that has it (provider, region, instance, billing).
# box:
#   hourly_rate: 0.8048
#   provider: aws
#   region: us-east-1
#   instance: g6.xlarge
#   billing: on-demand                # on-demand (default) or spot

# catalogs: your own price files (CSV), read with the plan; paths are relative to this file.
# catalogs: [prices.csv]
# embedded_catalog: whether the built-in price snapshot is used too (default true).
# embedded_catalog: false

# currency_rates: what one unit of each catalog currency is worth in the budget currency.
# currency_rates:
#   EUR: 1.08

# labels: who answers for the box and how long it may live; "gpuwarden up"
# sends them to the fleet server, whose orphan review flags boxes without them.
# labels:
#   owner: ana
#   ttl: 72h

# webhooks: where the agent's alerts go (Slack-compatible or JSON endpoints).
# webhooks: [https://hooks.slack.com/services/T000/B000/XXXX]

# targets: how "gpuwarden launch" gets the box, tried in order (plan A, plan B, …):
# your own launch command for each, as a template; "gpuwarden plan -o targets"
# writes them from the ranking. Capacity errors move on to the next target,
# quota errors skip the provider's region, auth errors stop.
# targets:
#   - name: plan-a
#     provider: aws
#     region: eu-west-1
#     zone: eu-west-1a
#     offer: p5.4xlarge
#     launch: >-
#       aws ec2 run-instances --region {{"{{"}}.Region{{"}}"}} --instance-type {{"{{"}}.Offer{{"}}"}}
#       --image-id ami-0123456789abcdef0 --tag-specifications
#       'ResourceType=instance,Tags=[{Key=Name,Value={{"{{"}}.Name{{"}}"}}}]'
#     stop: aws ec2 terminate-instances --region {{"{{"}}.Region{{"}}"}} --instance-ids {{"{{"}}.InstanceID{{"}}"}}
#     instance_id: '"InstanceId": "(i-[0-9a-f]+)"'
#     ready: ssh {{"{{"}}.Name{{"}}"}} true   # polled until it succeeds (optional)
#     timeout_seconds: 600

# launch_rules: your own classification of launch errors, tried before the built-in ones.
# launch_rules:
#   - provider: aws
#     pattern: InsufficientInstanceCapacity
#     class: capacity                 # capacity, quota, auth, config or unknown
#     scope: zone                     # what it rules out: zone, region or provider
#     why: AWS has none of these in the zone now
`

var (
	plainScalar = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)
	// yamlWords are plain scalars that some YAML reader takes for a boolean
	// or null (YAML 1.1 included), so they are quoted to stay text.
	yamlWords = map[string]bool{"null": true, "true": true, "false": true, "yes": true, "no": true,
		"on": true, "off": true, "y": true, "n": true}
)

// yamlString writes text as a plain scalar when that is unambiguous and as a
// double-quoted one otherwise; JSON string syntax is valid YAML.
func yamlString(v any) string {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case gpuwarden.WorkloadKind:
		s = string(x)
	case gpuwarden.Precision:
		s = string(x)
	case gpuwarden.Currency:
		s = string(x)
	}
	if plainScalar.MatchString(s) && !yamlWords[strings.ToLower(s)] {
		return s
	}
	return doubleQuoted(s)
}

// doubleQuoted writes text in YAML's double-quoted style, which is JSON's
// string syntax.
func doubleQuoted(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

// yamlNumber writes a float as people write it (120, 0.5), falling back to
// exponent form only where plain digits would be unreadable.
func yamlNumber(v float64) string {
	if a := math.Abs(v); v == 0 || a >= 1e-4 && a < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// yamlFlowList writes a list of text as [A, B].
func yamlFlowList(vs []string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = yamlString(v)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
