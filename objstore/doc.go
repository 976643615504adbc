// Package objstore keeps committed checkpoints somewhere durable: a local
// directory (another disk, a network mount), an S3-compatible bucket
// through minio-go, a Google Cloud Storage bucket (gs://, its JSON API on
// net/http, see gcs.go for why) or an Azure Blob container (az://, the
// official azblob client). s3://, gs:// and az:// share one implementation
// of the contract below (blob.go) over a small interface each client fills.
//
// A checkpoint is a directory whose manifest.json lists every file with its
// size and sha256. Every store lays a checkpoint out as NAME/FILE next to
// NAME/manifest.json and writes the manifest last, so a push that dies half
// way leaves no manifest and List never offers it. Files already held with
// the same size and sha256 are skipped, which makes a repeated or resumed
// sync send only what changed. A push succeeds only once the store has been
// seen holding every file and the manifest read back equals the one sent,
// so a caller may call the checkpoint durable. Every pull re-hashes what it
// receives against the manifest before the checkpoint appears under its
// name, because a resume from silently damaged weights costs more than a
// fresh start.
//
// A store is often shared, so gpuwarden deletes only what it wrote: Delete
// removes exactly the files a checkpoint's manifest lists (the manifest
// first), never a file beside them and nothing without a manifest, and Keep
// applies --keep only to checkpoints named the way the supervisor names
// them. A local store never follows a symlink beneath its directory.
//
// Residency asks each store where it is: S3's GetBucketLocation, the GCS
// bucket's Location; an Azure account's location is not visible to blob
// requests, so az:// needs --store-region (Options.StoreRegion) for a
// residency check, which also overrides what a self-hosted store reports.
//
// A store is not trusted further than it verifies. A pull copies at most
// each file's listed size plus one byte, reads a manifest of at most
// manifest.MaxSize bytes, and in a folder store opens only regular files,
// without waiting on a FIFO; every read of a folder store is bounded by its
// context even when the kernel holds it (a hung mount), see bounded.go.
package objstore
