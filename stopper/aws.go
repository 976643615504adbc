package stopper

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/gpuwarden/gpuwarden"
)

// EC2's documented interfaces:
//   - IMDSv2: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html
//   - role credentials: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/instance-metadata-security-credentials.html
//   - StopInstances: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_StopInstances.html
//   - DescribeInstances: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html
//   - error codes: https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
//
// The two Query API calls are written here over the SDK's SigV4 signer
// rather than with service/ec2, which would add 5.4 MB to the binary for
// two requests (measured in the package's report).
const (
	// DefaultAWSMetadata is IMDS's link-local address.
	DefaultAWSMetadata = "http://169.254.169.254"
	// AWSEC2Version is the EC2 Query API version.
	AWSEC2Version = "2016-11-15"

	awsTokenPath  = "/latest/api/token"
	awsTTLHeader  = "X-aws-ec2-metadata-token-ttl-seconds"
	awsTokHeader  = "X-aws-ec2-metadata-token"
	awsIDPath     = "/latest/meta-data/instance-id"
	awsRegionPath = "/latest/meta-data/placement/region"
	awsCredsPath  = "/latest/meta-data/iam/security-credentials/"
)

// AWS stops this EC2 instance with StopInstances. An OS shutdown already
// stops an EBS-backed instance's compute billing; this stopper is for
// `--stop api` and for reading back the confirmed state.
type AWS struct {
	// Metadata is IMDS's base URL (--aws-metadata).
	Metadata string
	// Endpoint is the EC2 API's base URL (--aws-endpoint); empty means
	// https://ec2.{region}.amazonaws.com.
	Endpoint string
	// Region and InstanceID override what IMDS says.
	Region, InstanceID string

	opts  Options
	cache proveCache

	mu       sync.Mutex
	imdsTok  string
	imdsExp  time.Time
	creds    aws.Credentials
	credsExp time.Time
}

// NewAWS returns the AWS stopper with the documented IMDS address.
func NewAWS(o Options) *AWS {
	return &AWS{Metadata: DefaultAWSMetadata, opts: o.withDefaults()}
}

// Method returns gpuwarden.StopAWS.
func (a *AWS) Method() string { return gpuwarden.StopAWS }

// imds reads one metadata path through IMDSv2 (token PUT, then GET).
func (a *AWS) imds(ctx context.Context, path string) (string, error) {
	for attempt := 0; ; attempt++ {
		tok, err := a.imdsToken(ctx)
		if err != nil {
			return "", err
		}
		res, err := do(ctx, a.opts.metaClient(), http.MethodGet, trimBase(a.Metadata)+path, http.Header{awsTokHeader: {tok}}, nil)
		if err != nil {
			return "", unreachable("EC2 instance metadata (IMDSv2)", "--aws-metadata", err)
		}
		if res.status == http.StatusUnauthorized && attempt == 0 {
			a.mu.Lock()
			a.imdsTok = ""
			a.mu.Unlock()
			continue
		}
		if res.status != http.StatusOK {
			return "", fmt.Errorf("aws metadata %s: status %d: %s", path, res.status, snippet(res.body))
		}
		return strings.TrimSpace(string(res.body)), nil
	}
}

// imdsToken returns a session token, asking for a new one when needed.
func (a *AWS) imdsToken(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Now()
	if a.imdsTok != "" && now.Before(a.imdsExp) {
		return a.imdsTok, nil
	}
	res, err := do(ctx, a.opts.metaClient(), http.MethodPut, trimBase(a.Metadata)+awsTokenPath,
		http.Header{awsTTLHeader: {"21600"}}, []byte{})
	if err != nil {
		return "", unreachable("EC2 instance metadata (IMDSv2)", "--aws-metadata", err)
	}
	if res.status != http.StatusOK || len(bytes.TrimSpace(res.body)) == 0 {
		return "", fail(gpuwarden.EEnvironment, "run on EC2 with IMDSv2 enabled (HttpEndpoint=enabled), or point --aws-metadata at it", nil,
			"aws metadata token: status %d: %s", res.status, snippet(res.body))
	}
	a.imdsTok, a.imdsExp = strings.TrimSpace(string(res.body)), now.Add(6*time.Hour-time.Minute)
	return a.imdsTok, nil
}

// identity returns the instance ID and region.
func (a *AWS) identity(ctx context.Context) (id, region string, err error) {
	id, region = a.InstanceID, a.Region
	if id == "" {
		if id, err = a.imds(ctx, awsIDPath); err != nil {
			return "", "", asEnvironment(err, "run on EC2, or point --aws-metadata at its IMDS")
		}
	}
	if region == "" {
		if region, err = a.imds(ctx, awsRegionPath); err != nil {
			return "", "", asEnvironment(err, "run on EC2, or point --aws-metadata at its IMDS")
		}
	}
	if !strings.HasPrefix(id, "i-") {
		return "", "", fail(gpuwarden.EEnvironment, "point --aws-metadata at EC2's IMDS", nil, "aws metadata: %q is not an instance ID", id)
	}
	return id, region, nil
}

// asEnvironment wraps a plain error as EEnvironment with a hint; an
// application error passes as it is.
func asEnvironment(err error, hint string) error {
	if gpuwarden.ErrorCodeOf(err) != gpuwarden.EInternal {
		return err
	}
	return fail(gpuwarden.EEnvironment, hint, err, "aws identity")
}

// awsRoleCreds is IMDS's iam/security-credentials/{role} document.
type awsRoleCreds struct {
	Code            string
	AccessKeyID     string `json:"AccessKeyId"`
	SecretAccessKey string
	Token           string
	Expiration      time.Time
}

// credentials returns the standard environment credentials, else the
// instance role's from IMDS, cached until five minutes before they expire.
func (a *AWS) credentials(ctx context.Context) (aws.Credentials, string, error) {
	env := a.opts.Getenv
	if k, s := env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"); k != "" && s != "" {
		return aws.Credentials{AccessKeyID: k, SecretAccessKey: s, SessionToken: env("AWS_SESSION_TOKEN"), Source: "environment"},
			"AWS_ACCESS_KEY_ID from the environment", nil
	}
	a.mu.Lock()
	if a.creds.AccessKeyID != "" && a.opts.Now().Before(a.credsExp) {
		c := a.creds
		a.mu.Unlock()
		return c, "instance role " + c.Source, nil
	}
	a.mu.Unlock()
	noRole := "attach an IAM role (instance profile) to the instance that allows ec2:StopInstances and ec2:DescribeInstances on it, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
	role, err := a.imds(ctx, awsCredsPath)
	if err != nil || role == "" {
		return aws.Credentials{}, "", fail(gpuwarden.EUnauthorized, noRole, err, "aws: no credentials (no environment keys, no instance role)")
	}
	role, _, _ = strings.Cut(role, "\n")
	doc, err := a.imds(ctx, awsCredsPath+role)
	if err != nil {
		return aws.Credentials{}, "", fail(gpuwarden.EUnauthorized, noRole, err, "aws: instance role %s credentials", role)
	}
	var rc awsRoleCreds
	if err := json.Unmarshal([]byte(doc), &rc); err != nil || rc.AccessKeyID == "" || (rc.Code != "" && rc.Code != "Success") {
		return aws.Credentials{}, "", fail(gpuwarden.EUnauthorized, noRole, err, "aws: instance role %s gave no credentials: %s", role, snippet([]byte(doc)))
	}
	c := aws.Credentials{AccessKeyID: rc.AccessKeyID, SecretAccessKey: rc.SecretAccessKey, SessionToken: rc.Token,
		Source: role, CanExpire: !rc.Expiration.IsZero(), Expires: rc.Expiration}
	exp := a.opts.Now().Add(time.Hour)
	if c.CanExpire {
		exp = rc.Expiration.Add(-5 * time.Minute)
	}
	a.mu.Lock()
	a.creds, a.credsExp = c, exp
	a.mu.Unlock()
	return c, "instance role " + role, nil
}

// ec2Error is EC2's error document.
type ec2Error struct {
	Errors []struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Errors>Error"`
	RequestID string `xml:"RequestID"`
}

// ec2Answer is one Query API answer: the status, the first error code and
// message when it failed, and the body.
type ec2Answer struct {
	status    int
	code, msg string
	requestID string
	body      []byte
}

// call signs and sends one EC2 Query API request.
func (a *AWS) call(ctx context.Context, region string, params url.Values) (ec2Answer, error) {
	creds, _, err := a.credentials(ctx)
	if err != nil {
		return ec2Answer{}, err
	}
	endpoint := a.Endpoint
	if endpoint == "" {
		endpoint = "https://ec2." + region + ".amazonaws.com"
	}
	params.Set("Version", AWSEC2Version)
	body := []byte(params.Encode())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, trimBase(endpoint)+"/", bytes.NewReader(body))
	if err != nil {
		return ec2Answer{}, fail(gpuwarden.EInvalid, "check --aws-endpoint", err, "aws endpoint %q", endpoint)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	sum := sha256.Sum256(body)
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "ec2", region, a.opts.Now().UTC()); err != nil {
		return ec2Answer{}, fmt.Errorf("aws: sign request: %w", err)
	}
	res, err := do(ctx, a.opts.apiClient(), req.Method, req.URL.String(), req.Header, body)
	if err != nil {
		return ec2Answer{}, unreachable("the EC2 API at "+endpoint, "--aws-endpoint", err)
	}
	ans := ec2Answer{status: res.status, body: res.body}
	if res.status/100 != 2 {
		var e ec2Error
		if xml.Unmarshal(res.body, &e) == nil && len(e.Errors) > 0 {
			ans.code, ans.msg, ans.requestID = e.Errors[0].Code, e.Errors[0].Message, e.RequestID
		}
	}
	return ans, nil
}

// failure maps an EC2 error answer to an application error.
func (a *AWS) failure(op, id, region string, ans ec2Answer) error {
	msg := fmt.Sprintf("aws %s: status %d %s: %s", op, ans.status, cmpOr(ans.code, "error"), cmpOr(ans.msg, snippet(ans.body)))
	switch ans.code {
	case "UnauthorizedOperation", "AccessDenied", "AccessDeniedException":
		return fail(gpuwarden.EForbidden, grantAWS(id, region), nil, "%s", msg)
	case "AuthFailure", "InvalidClientTokenId", "SignatureDoesNotMatch", "ExpiredToken", "RequestExpired", "UnrecognizedClientException":
		return fail(gpuwarden.EUnauthorized, "check the instance role or the AWS_* credentials (and the clock: SigV4 allows 5 minutes of skew)", nil, "%s", msg)
	case "InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed":
		return fail(gpuwarden.ENotFound, "check the instance ID and region (IMDS, or --aws-endpoint pointing at the instance's region)", nil, "%s", msg)
	}
	return fail(gpuwarden.EUnavailable, "retry later; EC2 answered an error", nil, "%s", msg)
}

// grantAWS is the fix for a refused stop.
func grantAWS(id, region string) string {
	return fmt.Sprintf("add ec2:StopInstances (and ec2:DescribeInstances) on arn:aws:ec2:%s:<account>:instance/%s to the instance role's policy", region, id)
}

// Prove reads the instance's identity and credentials, then asks EC2 for
// StopInstances with DryRun=true: DryRunOperation means allowed,
// UnauthorizedOperation refused. DescribeInstances is dry-run too, since
// confirming the stopped state needs it.
func (a *AWS) Prove(ctx context.Context) (gpuwarden.StopProof, error) {
	return a.cache.prove(ctx, a.opts, a.prove)
}

func (a *AWS) prove(ctx context.Context) (gpuwarden.StopProof, error) {
	p := newProof(a.Method(), a.opts.Now())
	id, region, err := a.identity(ctx)
	if err != nil {
		return p.refuse(err)
	}
	p.check("instance %s in %s", id, region)
	_, source, err := a.credentials(ctx)
	if err != nil {
		return p.refuse(err)
	}
	p.check("credentials: %s", source)
	ans, err := a.call(ctx, region, url.Values{"Action": {"StopInstances"}, "InstanceId.1": {id}, "DryRun": {"true"}})
	if err != nil {
		return p.refuse(err)
	}
	if ans.code != "DryRunOperation" {
		if ans.status/100 == 2 {
			return p.refuse(fail(gpuwarden.EInternal, "check --aws-endpoint: an EC2 API honours DryRun", nil,
				"aws StopInstances with DryRun=true answered %d without DryRunOperation", ans.status))
		}
		return p.refuse(a.failure("StopInstances (DryRun)", id, region, ans))
	}
	p.check("StopInstances DryRun: DryRunOperation (allowed)")
	d, err := a.call(ctx, region, url.Values{"Action": {"DescribeInstances"}, "InstanceId.1": {id}, "DryRun": {"true"}})
	switch {
	case err != nil:
		return p.refuse(err)
	case d.code == "DryRunOperation" || d.status/100 == 2:
		p.check("DescribeInstances DryRun: allowed (the state after a stop can be confirmed)")
	default:
		p.check("DescribeInstances refused (%s): a stop will be reported stop-requested, unconfirmed", d.code)
	}
	return p.ok()
}

// ec2StopAnswer is StopInstancesResponse.
type ec2StopAnswer struct {
	RequestID string `xml:"requestId"`
	Items     []struct {
		ID      string `xml:"instanceId"`
		Current string `xml:"currentState>name"`
	} `xml:"instancesSet>item"`
}

// ec2DescribeAnswer is DescribeInstancesResponse, reduced to the states.
type ec2DescribeAnswer struct {
	Reservations []struct {
		Instances []struct {
			ID    string `xml:"instanceId"`
			State string `xml:"instanceState>name"`
		} `xml:"instancesSet>item"`
	} `xml:"reservationSet>item"`
}

// Stop calls StopInstances, then DescribeInstances until the instance is
// stopping or stopped (EC2 bills no instance usage outside running) or
// ConfirmWithin passes.
func (a *AWS) Stop(ctx context.Context) (gpuwarden.StopOutcome, error) {
	start := a.opts.Now()
	out := gpuwarden.StopOutcome{Method: a.Method(), At: start, Billing: gpuwarden.NodeRunning}
	id, region, err := a.identity(ctx)
	if err != nil {
		return out, err
	}
	defer a.cache.forget()
	ans, err := a.call(ctx, region, url.Values{"Action": {"StopInstances"}, "InstanceId.1": {id}})
	if err != nil {
		return out, err
	}
	out.HTTPStatus = ans.status
	if ans.status/100 != 2 {
		return out, a.failure("StopInstances", id, region, ans)
	}
	var stop ec2StopAnswer
	_ = xml.Unmarshal(ans.body, &stop)
	out.OperationID = stop.RequestID
	out.Billing = gpuwarden.NodeStopRequested
	if len(stop.Items) > 0 {
		out.State = stop.Items[0].Current
	}
	a.opts.Log.Info("aws stop accepted", "instance", id, "state", out.State, "request", out.OperationID)
	state, done, err := poll(ctx, a.opts, start, func(ctx context.Context) (string, time.Duration, error) {
		d, err := a.call(ctx, region, url.Values{"Action": {"DescribeInstances"}, "InstanceId.1": {id}})
		if err != nil {
			return "", 0, err
		}
		if d.status/100 != 2 {
			return "", 0, a.failure("DescribeInstances", id, region, d)
		}
		var desc ec2DescribeAnswer
		if err := xml.Unmarshal(d.body, &desc); err != nil {
			return "", 0, fmt.Errorf("aws DescribeInstances: decode: %w", err)
		}
		for _, r := range desc.Reservations {
			for _, in := range r.Instances {
				if in.ID == id {
					return in.State, 0, nil
				}
			}
		}
		return "", 0, fmt.Errorf("aws DescribeInstances: %s not in the answer", id)
	}, func(s string) bool { return s == "stopping" || s == "stopped" })
	out.At = a.opts.Now()
	if state != "" {
		out.State = state
	}
	switch {
	case err != nil:
		out.Detail = "StopInstances accepted; reading the state back failed: " + err.Error()
	case done:
		out.Billing = gpuwarden.NodeStopped
		out.Detail = "EC2 reports the instance " + state + ": no instance usage bills outside running; EBS volumes and IPs still do"
	default:
		out.Detail = "StopInstances accepted; the instance was " + cmpOr(state, "in an unknown state") + " after " +
			out.At.Sub(start).Round(time.Second).String()
	}
	return out, nil
}
