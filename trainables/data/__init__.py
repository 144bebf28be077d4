"""What a run reads: text corpus, feature store (converters, CLIP extraction), schedule, batches,
the demo world, filter statistics. May import: runtime, evaluation, objectives, models, config."""
