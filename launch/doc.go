// Package launch is `gpuwarden launch`: it tries plan A, then plan B, and
// says in plain words why it moved on.
//
// gpuwarden does not talk to cloud APIs to launch. Each gpuwarden.Target
// carries the team's own shell command (aws ec2 run-instances, gcloud
// compute instances create, runpodctl, sky launch, any script), so launch
// works with whatever launcher a team already trusts. What launch adds is
// what those commands lack: reading a failure, knowing what it rules out,
// and moving on without wasting the afternoon.
//
// # One launch
//
// Run gives the launch an ID (time plus random hex) and each attempt the ID
// LaunchID-N and a box name gw-<hex>-<N>, valid as an instance name on every
// cloud. For each target in order it:
//
//   - skips the target if an earlier failure ruled it out (see below);
//   - waits the backoff owed by the last failure;
//   - records a pending attempt (MayExist true, the stop command resolved)
//     before the command runs, so a crash mid-launch leaves a record that
//     Cleanup can act on;
//   - runs the rendered Launch with sh -c in its own process group, the
//     environment plus GPUWARDEN_LAUNCH_ID, GPUWARDEN_TARGET, GPUWARDEN_NAME
//     and the target's fields, and kills the group at TimeoutSeconds or the
//     launch deadline;
//   - on exit 0 reads the instance ID, re-renders Stop with it, waits for
//     Ready and/or WaitAgent and records the provisioning time;
//   - on a non-zero exit classifies the output with the plan's rules, then
//     DefaultRules: auth stops the launch (EEnvironment), config stops it
//     (EInvalid), capacity and quota rule out their scope and move on, and
//     anything unmatched moves on with MayExist set, since the command may
//     have created something before it failed. A timeout is the same.
//
// # What a failure rules out
//
// A quota failure rules out the provider's region (or the whole provider
// when the rule says so, as GCP's GPUS_ALL_REGIONS does): the account will
// not get that there, whatever the offer. A capacity failure rules out the
// same offer in the same zone (in the region when the target has no zone):
// a zone out of H100s may still have L40S, so other offers are still tried.
// Between rounds only capacity failures are forgotten, and only targets that
// failed or were skipped for capacity are tried again.
//
// # Stop commands
//
// Stop is rendered before the launch runs, when the instance ID is not yet
// known, so that a crash leaves something to run. A stop command that can
// find the box by its name ({{.Name}}, also $GPUWARDEN_NAME) works in both
// cases; {{if .InstanceID}} … {{else}} … {{end}} prefers the ID once it is
// known. An ID read from output is used only if it is a plain word. The
// built-in stops (templates.go) do both, and exit 0 only once a describe
// or list shows the box gone, since Cleanup takes exit 0 to mean exactly
// that; Cleanup tries a failing stop again, and what still fails stays
// uncleaned for the next cleanup.
//
// # Values are data
//
// Every {{…}} of a command template is escaped for the shell by Render,
// for the quoting it sits in: one word outside quotes, escaped inside '…'
// or "…" (escapeShell follows the quoting through the template's text). A
// value where no escaping is safe (inside `…`, ${…} or a here-document) is
// an error that the plan-file check reports; such a command reads the
// value from the environment instead ($GPUWARDEN_REGION …). The names a
// target carries are also held to gpuwarden.CheckName, as a price
// catalog's rows are when read, so a region from a third-party catalog is
// refused long before it could reach a shell.
package launch
