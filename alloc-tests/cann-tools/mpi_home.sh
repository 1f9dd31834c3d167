# Sourced by hccl_test.sh and examples.sh: sets mpi_home to an MPI_HOME that CANN's Makefiles
# can link against, given $work (a directory to make a stand-in in).
#
# The Makefiles take MPI from $(MPI_HOME)/include and link -L$(MPI_HOME)/lib -lmpi. Debian's
# OpenMPI is built with its C++ bindings, which its mpi.h pulls into every C++ file, so -lmpi
# alone leaves MPI::Comm & co. undefined; an OpenMPI built from source (the tools' usual MPI)
# has no such bindings by default. For such an MPI, a stand-in MPI_HOME links both: the same
# headers, and a libmpi.so that is a linker script naming libmpi_cxx.so and libmpi.so. The
# Makefiles stay as they are.
mpi_home=${MPI_HOME:-$(dirname "$(mpicc --showme:libdirs | tr ' ' '\n' | grep -m1 .)")}
if [[ -f $mpi_home/lib/libmpi_cxx.so ]]; then
  mkdir -p "$work/mpi/lib"
  ln -sfn "$mpi_home/include" "$work/mpi/include"
  echo "INPUT($mpi_home/lib/libmpi_cxx.so $mpi_home/lib/libmpi.so)" >"$work/mpi/lib/libmpi.so"
  mpi_home=$work/mpi
fi
