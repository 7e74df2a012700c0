# A batch job whose allocation is a runreaper run: add the two tasks of the
# "runreaper" comments to your own group. raw_exec runs them on the host,
# where runreaperctl and the daemon's socket are.
job "example" {
  type = "batch"

  group "build" {
    # runreaper: the allocation's anchor, alive while the main tasks run.
    task "runreaper-anchor" {
      driver = "raw_exec"
      # It sweeps the run when Nomad stops it: room for the SIGINT ->
      # SIGTERM -> SIGKILL ladder (Nomad's default is 5s).
      kill_timeout = "30s"
      # With tasks that have `user = "U"`, give both runreaper tasks the
      # same user (a run of U signals only processes of U).
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        command = "/usr/share/runreaper/runners/nomad/anchor.sh"
      }
    }

    # Your main task(s): what they leak carries NOMAD_ALLOC_ID.
    task "build" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "make test"]
      }
    }

    # runreaper: ends the run once the main tasks are dead.
    task "runreaper-finish" {
      driver = "raw_exec"
      lifecycle {
        hook = "poststop"
      }
      config {
        command = "/usr/share/runreaper/runners/nomad/poststop.sh"
      }
    }
  }
}
