#!/bin/sh
# A minimal custom trainer: every rank prints where it runs, "trains" for a
# few steps and exits 0. Real trainers link libparallax (trainer/).
echo "rank $PARALLAX_RANK of $PARALLAX_WORLD_SIZE (local rank $PARALLAX_LOCAL_RANK on host $PARALLAX_HOST_INDEX), attempt $PARALLAX_ATTEMPT, job $PARALLAX_JOB_ID"
steps=${HELLO_STEPS:-5}
i=1
while [ "$i" -le "$steps" ]; do
  echo "rank $PARALLAX_RANK step $i/$steps"
  sleep 0.2
  i=$((i + 1))
done
echo "rank $PARALLAX_RANK done"
