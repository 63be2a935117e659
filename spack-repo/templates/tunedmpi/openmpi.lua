{#- Spack's Lmod module for openmpi (the untuned baseline), used by the tuned-mpi-modules site
    environments (site-configs/<site>/spack.yaml, modules: ... openmpi: template:). It is Spack's
    stock module plus family("mpi"), the family the tuned module declares too, so that
    `module load openmpi/<v>` and `module load openmpi-tuned/<v>` swap for each other. -#}
{% extends "modules/modulefile.lua" %}
{% block footer %}
-- tuned-mpi-modules: one MPI at a time; openmpi-tuned/{{ spec.version }} swaps with this module.
family("mpi")
{% endblock %}
