package preempt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// DetectTimeout bounds Detect, so that `gpuwarden up` on a laptop or a bare
// metal box starts within a second.
const DetectTimeout = time.Second

// probe asks one provider whether it is there.
type probe struct {
	name string
	run  func(ctx context.Context) (Source, error)
}

// Detect probes the three metadata services at once and returns the Source of
// the one that answers: AWS when the IMDSv2 token PUT succeeds and the token
// reads an instance ID (other clouds' EC2-compatible services exist), GCP when a
// response carries Metadata-Flavor: Google, Azure when Scheduled Events or the
// instance document answers. AWS and Azure share 169.254.169.254, so each
// probe asks for something only its own cloud serves. When several answer
// the order aws, gcp, azure decides, so the result never depends on timing;
// when none answers within DetectTimeout it returns ErrNoCloud.
func Detect(ctx context.Context, client *http.Client, ep Endpoints) (Source, error) {
	client = newClientIfNil(client)
	ctx, cancel := context.WithTimeout(ctx, DetectTimeout)
	defer cancel()

	probes := []probe{
		{ProviderAWS, func(ctx context.Context) (Source, error) {
			a := NewAWS(client, ep.AWS)
			return a, a.probe(ctx)
		}},
		{ProviderGCP, func(ctx context.Context) (Source, error) {
			g := NewGCP(client, ep.GCP)
			return g, g.probe(ctx)
		}},
		{ProviderAzure, func(ctx context.Context) (Source, error) {
			z := NewAzure(client, ep.Azure)
			return z, firstSuccess(ctx,
				func(ctx context.Context) error { _, err := z.document(ctx); return err },
				z.probeInstance)
		}},
	}

	type result struct {
		i   int
		src Source
		err error
	}
	results := make(chan result, len(probes))
	for i, p := range probes {
		go func() {
			src, err := p.run(ctx)
			results <- result{i, src, err}
		}()
	}
	done := make([]bool, len(probes))
	found := make([]Source, len(probes))
	errs := make([]error, len(probes))
	for range probes {
		r := <-results
		done[r.i] = true
		if r.err != nil {
			errs[r.i] = fmt.Errorf("%s: %w", probes[r.i].name, r.err)
		} else {
			found[r.i] = r.src
		}
		// The first answer wins unless a preferred probe is still out.
		for i := range probes {
			if !done[i] {
				break
			}
			if found[i] != nil {
				return found[i], nil
			}
		}
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return nil, err
	}
	return nil, fmt.Errorf("%w: %w", ErrNoCloud, errors.Join(errs...))
}

// firstSuccess runs the checks at once and returns nil as soon as one
// passes, or every error when none does.
func firstSuccess(ctx context.Context, checks ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, len(checks))
	for _, check := range checks {
		go func() { errc <- check(ctx) }()
	}
	var errs []error
	for range checks {
		err := <-errc
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
