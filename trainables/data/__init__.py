"""What a run reads: text corpus, feature store (converters, CLIP extraction, teacher columns),
schedule, batches, demo world, filter statistics. May import: runtime, evaluation, objectives, models, config."""
