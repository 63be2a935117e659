{#- Spack's Lmod module for openmpi-tuned (spack-repo/templates/tunedmpi/openmpi-tuned.lua).
    It is the module that `tunedmpi render` wrote into the package prefix at install time, byte
    for byte: the package's lmod_context reads share/tunedmpi/modulefiles/<site>/openmpi-tuned/
    <version>.lua (packages/openmpi_tuned/package.py). The selection logic lives in one place, the
    project's renderer and its templates (src/tunedmpi/render/); nothing of it is repeated here.
    Spack's autoloads, environment modifications and timestamp header are left out on purpose:
    the rendered module is complete (family "mpi", the MPI's bin/ on PATH, the tuned variables). -#}
{{ tunedmpi_module }}
