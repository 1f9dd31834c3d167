/* Declarations written the way hicann/hcomm's include/hcomm_res.h declares them: the
 * libhcomm memory calls for symmetric windows. Only what the tests use. */
#ifndef HCOMM_RES_H_
#define HCOMM_RES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* HCCL's result codes (HCCL_SUCCESS, HCCL_E_PARA, HCCL_E_RUNTIME, ...) as an int32_t. */
typedef int32_t HcommResult;

/* Reserve + allocate physical memory + map, `size` rounded up to the granularity, on the
 * current device. Free with HcommMemFree. */
extern HcommResult HcommMemAlloc(void **ptr, size_t size);
extern HcommResult HcommMemFree(void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* HCOMM_RES_H_ */
