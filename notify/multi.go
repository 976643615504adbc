package notify

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gpuwarden/gpuwarden"
)

// Multi sends each event to every notifier at once, so that a slow or
// failing one (a hung webhook) neither delays nor stops the others.
type Multi []gpuwarden.Notifier

var _ gpuwarden.Notifier = Multi(nil)

// Notify waits for every notifier and joins their errors; nil entries are
// skipped.
func (m Multi) Notify(ctx context.Context, e gpuwarden.Event) error {
	errs := make([]error, len(m))
	var wg sync.WaitGroup
	for i, n := range m {
		if n == nil {
			continue
		}
		wg.Go(func() {
			if err := n.Notify(ctx, e); err != nil {
				errs[i] = fmt.Errorf("notifier %d: %w", i+1, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
