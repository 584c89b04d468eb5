// Package blob keeps the large artefacts of runs — documents, files,
// screenshots — out of checkpoints. A step stores the bytes with
// steps.Context.PutBlob and keeps the returned Ref (bucket, name, digest,
// size: a few hundred bytes) in its state; a later step reads them back
// with GetBlob. A checkpoint stays small however large the document.
//
//	w := steps.New[Claim]("claims", 1)
//	assess := w.Ref("assess")
//	w.Step("fetch", func(ctx context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
//		pdf, err := download(ctx, c.DocumentURL) // your client
//		if err != nil {
//			return steps.Outcome[Claim]{}, err
//		}
//		c.Document, err = s.PutBlob(ctx, "claim-form.pdf", pdf) // a blob.Ref
//		if err != nil {
//			return steps.Outcome[Claim]{}, err
//		}
//		return steps.Next(assess, c), nil
//	}).Step("assess", func(ctx context.Context, s *steps.Context, c Claim) (steps.Outcome[Claim], error) {
//		pdf, err := s.GetBlob(ctx, c.Document) // verified against the blob.Ref's digest
//		...
//	})
//
// Names are per logical step and content (see ObjectName): a retried step
// that stores the same bytes again uploads nothing, and one that stores
// other bytes gets a new object rather than overwriting the bytes another
// attempt's checkpoint may already reference.
//
// This package is driver-free, so pkg/steps can depend on it; the
// JetStream Object Store implementation is in package objstore, and
// Memory serves tests. Retention deletes a run's blobs a configurable time
// after the run ended.
package blob
