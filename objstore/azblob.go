package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/gpuwarden/gpuwarden"
)

// AzureConnectionStringEnv names the connection string az:// uses when set
// (Azurite's development account in tests, or an account key or SAS);
// without it the store signs in with azidentity's default chain, which ends
// in the VM's managed identity.
const AzureConnectionStringEnv = "AZURE_STORAGE_CONNECTION_STRING"

// azureBlockSize is the block of a staged upload. Azure allows 50,000
// blocks to a blob, so 8 MiB blocks carry 390 GiB; larger files get larger
// blocks (azureBlockSizeFor).
const azureBlockSize = 8 << 20

// azureMaxBlocks is Azure's limit on the committed blocks of one blob.
const azureMaxBlocks = 50000

// Azure keeps checkpoints in an Azure Blob Storage container as
// PREFIX/NAME/FILE and PREFIX/NAME/manifest.json, through the official
// client.
type Azure struct {
	blobStore
	// Account is the storage account's name.
	Account string
	// Container is the container's name.
	Container string
	// StatedRegion is --store-region. Azure's data plane does not tell an
	// account's location (only the management API does, with other
	// credentials), so residency needs it stated.
	StatedRegion string

	client *azblob.Client
}

var (
	_ gpuwarden.CheckpointStore = (*Azure)(nil)
	_ Regional                  = (*Azure)(nil)
)

// NewAzure returns a store for container of account under prefix ("" for
// the container's root). With AZURE_STORAGE_CONNECTION_STRING set it uses
// that string, which must name the same account; otherwise it signs in with
// azidentity.DefaultAzureCredential (environment, workload identity,
// managed identity, in that order). It makes no request.
func NewAzure(account, containerName, prefix string, opts Options) (*Azure, error) {
	if err := checkAzureNames(account, containerName); err != nil {
		return nil, err
	}
	var client *azblob.Client
	if cs := os.Getenv(AzureConnectionStringEnv); cs != "" {
		if err := connectionStringNames(cs, account); err != nil {
			return nil, err
		}
		c, err := azblob.NewClientFromConnectionString(cs, nil)
		if err != nil {
			return nil, gpuwarden.Errorf(gpuwarden.EInvalid, "%s: %v", AzureConnectionStringEnv, err).
				WithHint("copy the connection string from the storage account's Access keys page")
		}
		client = c
	} else {
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, (&gpuwarden.Error{Code: gpuwarden.EUnauthorized, Message: "azure credential", Err: err}).
				WithHint("give the VM a managed identity with the Storage Blob Data Contributor role, or set %s", AzureConnectionStringEnv)
		}
		c, err := azblob.NewClient("https://"+account+".blob.core.windows.net/", cred, nil)
		if err != nil {
			return nil, fmt.Errorf("azure blob client: %w", err)
		}
		client = c
	}
	a := &Azure{Account: account, Container: containerName, StatedRegion: opts.StoreRegion, client: client}
	a.blobStore = blobStore{Prefix: prefix, Sent: opts.Sent, api: azureAPI{a}}
	return a, nil
}

// Region returns --store-region. Without it the location cannot be known
// from the data plane, and a residency check must not pass on a guess, so
// it is an error that says how to state it.
func (a *Azure) Region(ctx context.Context) (string, error) {
	if a.StatedRegion != "" {
		return a.StatedRegion, nil
	}
	return "", gpuwarden.Errorf(gpuwarden.EInvalid, "%s: an Azure storage account's location is not visible to blob requests", a.Where()).
		WithHint("state it with --store-region (the account's region, e.g. germanywestcentral, or a country code such as DE)")
}

// connectionStringNames refuses a connection string for another account
// than the target's, which would quietly put checkpoints elsewhere.
func connectionStringNames(cs, account string) error {
	var name, endpoint string
	for _, part := range strings.Split(cs, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch strings.ToLower(k) {
		case "accountname":
			name = v
		case "blobendpoint":
			endpoint = v
		}
	}
	if name == "" && endpoint != "" {
		// A SAS string names no account: it is the endpoint's first label
		// (ACCOUNT.blob…) or, for an emulator, its first path segment.
		if u, err := url.Parse(endpoint); err == nil {
			if host, _, ok := strings.Cut(u.Hostname(), "."); ok && !isIP(u.Hostname()) {
				name = host
			} else {
				name, _, _ = strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
			}
		}
	}
	if !strings.EqualFold(name, account) {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "%s is for account %q, the target names %q", AzureConnectionStringEnv, name, account).
			WithHint("use az://%s/CONTAINER/PREFIX, or the connection string of account %s", name, account)
	}
	return nil
}

// isIP reports whether host is an IPv4 address (an emulator's endpoint).
func isIP(host string) bool {
	return strings.Trim(host, "0123456789.") == ""
}

// azureAPI is the blobAPI of an Azure container.
type azureAPI struct{ a *Azure }

func (z azureAPI) scheme() string { return "az://" + z.a.Account + "/" + z.a.Container }

func (z azureAPI) blob(key string) *blob.Client {
	return z.a.client.ServiceClient().NewContainerClient(z.a.Container).NewBlobClient(key)
}

func (z azureAPI) stat(ctx context.Context, key string) (int64, string, bool, error) {
	p, err := z.blob(key).GetProperties(ctx, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, azureError(z.a.Container, err)
	}
	var size int64
	if p.ContentLength != nil {
		size = *p.ContentLength
	}
	return size, metaValue(p.Metadata, metaSHA256), true, nil
}

// put stages r in blocks, uploadThreads at a time, and commits them with
// the metadata in one request, so the object appears whole or not at all.
func (z azureAPI) put(ctx context.Context, key string, r io.Reader, size int64, sha, contentType string) error {
	ct := contentType
	_, err := z.a.client.UploadStream(ctx, z.a.Container, key, r, &azblob.UploadStreamOptions{
		BlockSize:   azureBlockSizeFor(size),
		Concurrency: uploadThreads,
		Metadata:    map[string]*string{metaSHA256: &sha},
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &ct},
	})
	if err != nil {
		return azureError(z.a.Container, err)
	}
	return nil
}

// azureBlockSizeFor grows the block for a file that would need more than
// azureMaxBlocks blocks of the default size.
func azureBlockSizeFor(size int64) int64 {
	bs := int64(azureBlockSize)
	if need := (size + azureMaxBlocks - 1) / azureMaxBlocks; need > bs {
		bs = (need + 1<<20 - 1) &^ (1<<20 - 1) // whole MiB
	}
	return bs
}

func (z azureAPI) open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	res, err := z.a.client.DownloadStream(ctx, z.a.Container, key, nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil, 0, &gpuwarden.Error{Code: gpuwarden.ENotFound, Message: key + " not found", Err: err}
	}
	if err != nil {
		return nil, 0, azureError(z.a.Container, err)
	}
	var size int64
	if res.ContentLength != nil {
		size = *res.ContentLength
	}
	return res.Body, size, nil
}

func (z azureAPI) children(ctx context.Context, prefix string) ([]string, error) {
	pager := z.a.client.ServiceClient().NewContainerClient(z.a.Container).
		NewListBlobsHierarchyPager("/", &container.ListBlobsHierarchyOptions{Prefix: &prefix})
	var out []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, azureError(z.a.Container, err)
		}
		if page.Segment == nil {
			continue
		}
		for _, p := range page.Segment.BlobPrefixes {
			if p == nil || p.Name == nil {
				continue
			}
			if name, ok := childName(prefix, *p.Name); ok {
				out = append(out, name)
			}
		}
	}
	return out, nil
}

func (z azureAPI) remove(ctx context.Context, key string) error {
	_, err := z.a.client.DeleteBlob(ctx, z.a.Container, key, nil)
	if err == nil || bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil
	}
	return azureError(z.a.Container, err)
}

// azureError gives the failures a user can fix the codes and hints the CLI
// maps once: a missing container and refused credentials.
func azureError(containerName string, err error) error {
	var re *azcore.ResponseError
	status := 0
	if errors.As(err, &re) {
		status = re.StatusCode
	}
	var af *azidentity.AuthenticationFailedError
	switch {
	case bloberror.HasCode(err, bloberror.ContainerNotFound):
		return (&gpuwarden.Error{Code: gpuwarden.ENotFound, Message: fmt.Sprintf("container %s does not exist", containerName), Err: err}).
			WithHint("create the container in an account the plan allows, or fix the az:// target")
	case errors.As(err, &af), status == http.StatusUnauthorized, status == http.StatusForbidden:
		return (&gpuwarden.Error{Code: gpuwarden.EUnauthorized, Message: fmt.Sprintf("access to container %s refused", containerName), Err: err}).
			WithHint("give the managed identity the Storage Blob Data Contributor role on the account, or check %s", AzureConnectionStringEnv)
	}
	return err
}

// checkAzureNames applies Azure's naming rules (accounts: 3–24 lowercase
// letters and digits; containers: 3–63 lowercase letters, digits and
// hyphens) so a typo fails before any request.
func checkAzureNames(account, containerName string) error {
	ok := len(account) >= 3 && len(account) <= 24 && strings.Trim(account, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
	if !ok {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid storage account name %q", account).
			WithHint("account names are 3 to 24 lowercase letters and digits")
	}
	ok = len(containerName) >= 3 && len(containerName) <= 63 &&
		strings.Trim(containerName, "abcdefghijklmnopqrstuvwxyz0123456789-") == "" &&
		!strings.HasPrefix(containerName, "-") && !strings.Contains(containerName, "--")
	if !ok {
		return gpuwarden.Errorf(gpuwarden.EInvalid, "invalid container name %q", containerName).
			WithHint("container names are 3 to 63 lowercase letters, digits and single hyphens, starting with a letter or digit")
	}
	return nil
}
