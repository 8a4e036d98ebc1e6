"""A recognizer with fixed answers per task, resolved at once, for tests of what the pipeline makes of a layout."""

from __future__ import annotations

from concurrent.futures import Future

from pipeline.documents.recognizer import Recognition, RecognitionTask


class Answers:
    """Answers each region with `answers[task]` (empty when absent) and remembers the tasks it was given."""

    def __init__(self, answers: dict[str, str] | None = None) -> None:
        self.answers = answers or {}
        self.tasks: list[RecognitionTask] = []

    def submit(self, task: RecognitionTask) -> Future[Recognition]:
        self.tasks.append(task)
        future: Future[Recognition] = Future()
        future.set_result(Recognition(self.answers.get(task.task, ""), "stop"))
        return future

    def cancel(self, future: Future[Recognition]) -> None:
        """Nothing stays in flight."""
