package peertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Moto is a running moto_server (moto 5, the image's Python) on loopback:
// the real peer for EC2 and its IAM.
type Moto struct {
	URL string
	log *bytes.Buffer
}

// StartMoto runs moto_server on a free loopback port with env, and kills
// its process group when the test ends. Without moto_server the test skips,
// unless GPUWARDEN_PEER_TESTS=1 says CI must run it.
func StartMoto(t testing.TB, env ...string) *Moto {
	t.Helper()
	bin, err := Binary("moto_server")
	if err != nil {
		msg := "moto_server not available (" + err.Error() + "): it comes with the image's Python (pip install 'moto[server]')"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	port := FreePort(t)
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = t.TempDir()
	log := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start moto_server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	m := &Moto{URL: "http://127.0.0.1:" + strconv.Itoa(port), log: log}
	// Readiness: moto answers its own dashboard API, which counts as no
	// AWS action.
	deadline := time.Now().Add(60 * time.Second)
	for {
		res, err := http.Get(m.URL + "/moto-api/")
		if err == nil {
			res.Body.Close()
			return m
		}
		select {
		case <-exited:
			t.Fatalf("moto_server exited:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("moto_server not ready in 60s:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Query sends a signed Query API request to moto as a set-up step.
func (m *Moto) Query(t testing.TB, service, key, secret string, params url.Values) []byte {
	t.Helper()
	body := []byte(params.Encode())
	req, _ := http.NewRequest(http.MethodPost, m.URL+"/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: key, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), service, "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("moto %s %s: %d %s\n%s", service, params.Get("Action"), res.StatusCode, out, m.log)
	}
	return out
}

// User creates an IAM user whose inline policy allows actions, and
// returns its access key: three actions.
func (m *Moto) User(t testing.TB, name string, actions ...string) (key, secret string) {
	t.Helper()
	iam := func(p url.Values) []byte {
		p.Set("Version", "2010-05-08")
		return m.Query(t, "iam", "testing", "testing", p)
	}
	iam(url.Values{"Action": {"CreateUser"}, "UserName": {name}})
	quoted := make([]string, len(actions))
	for i, a := range actions {
		quoted[i] = strconv.Quote(a)
	}
	policy := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":[` + strings.Join(quoted, ",") + `],"Resource":"*"}]}`
	iam(url.Values{"Action": {"PutUserPolicy"}, "UserName": {name}, "PolicyName": {"gw"}, "PolicyDocument": {policy}})
	var ak struct {
		ID     string `xml:"CreateAccessKeyResult>AccessKey>AccessKeyId"`
		Secret string `xml:"CreateAccessKeyResult>AccessKey>SecretAccessKey"`
	}
	if err := xml.Unmarshal(iam(url.Values{"Action": {"CreateAccessKey"}, "UserName": {name}}), &ak); err != nil || ak.ID == "" {
		t.Fatalf("CreateAccessKey: %v", err)
	}
	return ak.ID, ak.Secret
}

// RunInstance launches one instance through moto's EC2 API: one action.
func (m *Moto) RunInstance(t testing.TB) string {
	t.Helper()
	var run struct {
		ID string `xml:"instancesSet>item>instanceId"`
	}
	body := m.Query(t, "ec2", "testing", "testing", url.Values{"Action": {"RunInstances"}, "Version": {"2016-11-15"},
		"ImageId": {"ami-12c6146b"}, "MinCount": {"1"}, "MaxCount": {"1"}, "InstanceType": {"t2.micro"}})
	if err := xml.Unmarshal(body, &run); err != nil || !strings.HasPrefix(run.ID, "i-") {
		t.Fatalf("RunInstances: %v\n%s", err, body)
	}
	return run.ID
}

// State reads an instance's state through moto as the given user.
func (m *Moto) State(t testing.TB, key, secret, id string) string {
	t.Helper()
	var d struct {
		State string `xml:"reservationSet>item>instancesSet>item>instanceState>name"`
	}
	_ = xml.Unmarshal(m.Query(t, "ec2", key, secret, url.Values{"Action": {"DescribeInstances"}, "Version": {"2016-11-15"},
		"InstanceId.1": {id}}), &d)
	return d.State
}
