"""Which executor runs a job: the runner's mode (--executor), its engine, the job's image and hint.

| runner mode | Docker engine | job                          | runs with                         |
|-------------|---------------|------------------------------|-----------------------------------|
| auto        | answers       | image                        | docker                            |
| auto        | answers       | no image                     | process                           |
| auto        | none          | image                        | process, image ignored (sys line) |
| docker      | answers       | image                        | docker                            |
| docker      | answers       | no image                     | refused                           |
| process     | —             | image                        | refused                           |
| any         |               | executor hint "process"      | process (image ignored), unless the mode is docker |
| any         |               | executor hint "docker"       | docker, or refused when there is no engine |
| slurm       | —             | no image                     | slurm (`process` is the Slurm executor)   |
| slurm       | —             | image, or hint "docker"      | refused: a container would escape scancel |

An implicit image (provider python's, SubmitJob.image_implicit) counts only where jobs run in
containers: elsewhere the job is a process job with its `python`, with no note.
"""

from lanpool.agent.executors.base import Executor, ExecutorError

MODES = ("auto", "docker", "process", "slurm")


class ExecutorChoice:
    def __init__(self, mode: str, process: Executor, docker: Executor | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"executor mode {mode!r}: use one of {', '.join(MODES)}")
        self.mode = mode
        self.process = process
        self.docker = docker if mode != "process" else None

    @property
    def kind(self) -> str:
        """What runs jobs that name an image here: "docker" or "process" (shown to controllers)."""
        return "docker" if self.docker is not None else "slurm" if self.mode == "slurm" else "process"

    def choose(self, image: str, hint: str = "", python: str = "", implicit: bool = False) -> tuple[Executor, str]:
        """The executor for a job, and a note for its log ("" if none); ExecutorError if it cannot run here
        (`python`, a version a process job needs, included). `implicit`: the image is not the job's own."""
        if implicit and (self.docker is None or hint == "process"):
            image = ""
        executor, note = self._choose(image, hint)
        if python and executor.in_container and not implicit:
            note = f"lanpool: python {python} asked; the job runs the Python of image {image!r}"
        if python and not executor.in_container:
            check = getattr(executor, "pythons", None)  # a ProcessExecutor's JobPythons
            if check is not None:
                check.check(python)
        return executor, note

    def _choose(self, image: str, hint: str) -> tuple[Executor, str]:
        if hint not in ("", "docker", "process"):
            raise ExecutorError(f"unknown executor {hint!r}: use 'docker' or 'process'")
        if self.mode == "slurm":
            if image or hint == "docker":
                what = f"image {image!r}" if image else "a container"
                raise ExecutorError(
                    f"the job needs {what} and this runner runs jobs through Slurm as plain processes only "
                    "(a container would escape scancel): drop `image:` or pick another runner"
                )
            return self.process, ""
        if hint == "process":
            if self.mode == "docker":
                raise ExecutorError(
                    "the job asks for the process executor; this runner runs jobs in containers "
                    "only (app agent serve --executor docker)"
                )
            note = f"lanpool: image {image!r} ignored: the job asks for the process executor" if image else ""
            return self.process, note
        if image or hint == "docker":
            if self.docker is not None:
                if not image:
                    raise ExecutorError("the job asks for the docker executor but names no image")
                return self.docker, ""
            if self.mode == "auto" and hint != "docker":
                return self.process, (
                    f"lanpool: no Docker engine on this runner: image {image!r} ignored, "
                    "the commands run as plain processes"
                )
            why = (
                "it runs jobs as plain processes (app agent serve --executor process)"
                if self.mode == "process"
                else "no Docker engine answered when its agent started"
            )
            what = f"image {image!r}" if image else "a container"
            raise ExecutorError(f"the job needs {what} and this runner cannot run containers: {why}")
        if self.mode == "docker":
            raise ExecutorError(
                "the job names no image; this runner runs jobs in containers only (app agent serve --executor docker)"
            )
        return self.process, ""

    def all(self) -> list[Executor]:
        return [self.process] if self.docker is None else [self.process, self.docker]

    def for_journal(self, name: str) -> Executor:
        """The executor that takes back a job the journal says ran with `name`; ExecutorError when there is none."""
        if name != "docker" or self.mode == "slurm":
            return self.process
        if self.docker is None:
            raise ExecutorError("the agent restarted without a Docker engine; the job's container was not re-adopted")
        return self.docker
