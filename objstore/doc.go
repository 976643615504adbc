// Package objstore keeps committed checkpoints somewhere durable: a local
// directory or an S3-compatible bucket (minio-go).
package objstore

import _ "github.com/minio/minio-go/v7"
