{#- Spack's Lmod module for openmpi-tuned (spack-repo/templates/tunedmpi/openmpi-tuned.lua).
    It is the module that `tunedmpi render` wrote into the package prefix at install time, byte
    for byte but for the absolute folder of its rules files when the table has bands: the
    package's lmod_context reads share/tunedmpi/spack-module.lua, which its install() wrote with
    `tunedmpi install-module --pinned-copy` (spack-repo/spack_repo/tunedmpi/packages/openmpi_tuned/package.py)
    from share/tunedmpi/modulefiles/<site>/openmpi-tuned/<version>.lua, pinned by
    tunedmpi.modules.render.pin_rules_dir. The selection logic lives in one place, the project's
    renderer and its templates (src/tunedmpi/modules/render/); nothing of it is repeated here.
    Spack's autoloads, environment modifications and timestamp header are left out on purpose:
    the rendered module is complete (family "mpi", the MPI's bin/ on PATH, the tuned variables). -#}
{{ tunedmpi_module }}
