"""What a user reads: numbers as they read, progress, notices of unchecked reads, the paper.

One precision rule per quantity (numbers) and polars' scalars as the numbers they hold
(scalars), progress bars and stage records (progress), degraded reads recorded for the
run's summary (notices), and the paper the kit checks, named once (citation). It may
import kit.files alone of the kit."""
