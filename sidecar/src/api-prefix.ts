/** The API version prefix every gateway path lives under. */
export const API_PREFIX = '/v1';
