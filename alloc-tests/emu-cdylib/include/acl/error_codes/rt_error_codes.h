/* The runtime's error codes, written the way CANN's acl/error_codes/rt_error_codes.h defines
 * them (values as in hicann/runtime's include/external/acl/error_codes/rt_error_codes.h). Only
 * what hccl_surface.cpp uses. */
#ifndef __INC_EXTERNEL_RT_ERROR_CODES_H__
#define __INC_EXTERNEL_RT_ERROR_CODES_H__

#define ACL_RT_SUCCESS 0
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID 107006
#define ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL 107007
#define ACL_ERROR_RT_INVALID_HANDLE 107017
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_INTERNAL_ERROR 507000

#endif
