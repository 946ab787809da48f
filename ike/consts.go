package ike

import "fmt"

// ExchangeType is the exchange a message belongs to (RFC 7296 §3.1).
type ExchangeType uint8

// The IKEv2 exchanges.
const (
	IKESAInit     ExchangeType = 34
	IKEAuth       ExchangeType = 35
	CreateChildSA ExchangeType = 36
	Informational ExchangeType = 37
)

// nameOf is names[v], or what(v) for a value without a name.
func nameOf[K ~uint8 | ~uint16](names map[K]string, v K, what string) string {
	if n, ok := names[v]; ok {
		return n
	}
	return fmt.Sprintf("%s(%d)", what, v)
}

var exchangeNames = map[ExchangeType]string{IKESAInit: "IKE_SA_INIT", IKEAuth: "IKE_AUTH", CreateChildSA: "CREATE_CHILD_SA",
	Informational: "INFORMATIONAL"}

func (e ExchangeType) String() string { return nameOf(exchangeNames, e, "exchange") }

// Flags are the header flags (RFC 7296 §3.1).
type Flags uint8

// The header flags.
const (
	FlagInitiator Flags = 0x08
	FlagVersion   Flags = 0x10
	FlagResponse  Flags = 0x20
)

// PayloadType is a payload's type in the next-payload chain (RFC 7296 §3.2).
type PayloadType uint8

// The payload types.
const (
	PayloadNone      PayloadType = 0
	PayloadSA        PayloadType = 33
	PayloadKE        PayloadType = 34
	PayloadIDi       PayloadType = 35
	PayloadIDr       PayloadType = 36
	PayloadCert      PayloadType = 37
	PayloadCertReq   PayloadType = 38
	PayloadAuth      PayloadType = 39
	PayloadNonce     PayloadType = 40
	PayloadNotify    PayloadType = 41
	PayloadDelete    PayloadType = 42
	PayloadVendorID  PayloadType = 43
	PayloadTSi       PayloadType = 44
	PayloadTSr       PayloadType = 45
	PayloadSK        PayloadType = 46
	PayloadConfig    PayloadType = 47
	PayloadEAP       PayloadType = 48
	PayloadSKF       PayloadType = 53
	payloadTypeLimit PayloadType = 54
)

var payloadNames = map[PayloadType]string{
	PayloadSA: "SA", PayloadKE: "KE", PayloadIDi: "IDi", PayloadIDr: "IDr", PayloadCert: "CERT",
	PayloadCertReq: "CERTREQ", PayloadAuth: "AUTH", PayloadNonce: "Nonce", PayloadNotify: "N",
	PayloadDelete: "D", PayloadVendorID: "V", PayloadTSi: "TSi", PayloadTSr: "TSr", PayloadSK: "SK",
	PayloadConfig: "CP", PayloadEAP: "EAP", PayloadSKF: "SKF",
}

func (p PayloadType) String() string { return nameOf(payloadNames, p, "payload") }

// ProtocolID names the protocol of a proposal, notification or deletion.
type ProtocolID uint8

// The protocol IDs.
const (
	ProtoIKE ProtocolID = 1
	ProtoAH  ProtocolID = 2
	ProtoESP ProtocolID = 3
)

var protocolNames = map[ProtocolID]string{ProtoIKE: "IKE", ProtoAH: "AH", ProtoESP: "ESP"}

func (p ProtocolID) String() string { return nameOf(protocolNames, p, "protocol") }

// NotifyType is a Notify payload's message type (RFC 7296 §3.10.1).
type NotifyType uint16

// The notify types espgw sends or acts on.
const (
	NotifyUnsupportedCriticalPayload NotifyType = 1
	NotifyInvalidIKESPI              NotifyType = 4
	NotifyInvalidMajorVersion        NotifyType = 5
	NotifyInvalidSyntax              NotifyType = 7
	NotifyInvalidMessageID           NotifyType = 9
	NotifyInvalidSPI                 NotifyType = 11
	NotifyNoProposalChosen           NotifyType = 14
	NotifyInvalidKEPayload           NotifyType = 17
	NotifyAuthenticationFailed       NotifyType = 24
	NotifySinglePairRequired         NotifyType = 34
	NotifyNoAdditionalSAs            NotifyType = 35
	NotifyInternalAddressFailure     NotifyType = 36
	NotifyFailedCPRequired           NotifyType = 37
	NotifyTSUnacceptable             NotifyType = 38
	NotifyInvalidSelectors           NotifyType = 39
	NotifyTemporaryFailure           NotifyType = 43
	NotifyChildSANotFound            NotifyType = 44

	NotifyInitialContact         NotifyType = 16384
	NotifySetWindowSize          NotifyType = 16385
	NotifyAdditionalTSPossible   NotifyType = 16386
	NotifyIPCompSupported        NotifyType = 16387
	NotifyNATDetectionSourceIP   NotifyType = 16388
	NotifyNATDetectionDestIP     NotifyType = 16389
	NotifyCookie                 NotifyType = 16390
	NotifyUseTransportMode       NotifyType = 16391
	NotifyHTTPCertLookup         NotifyType = 16392
	NotifyRekeySA                NotifyType = 16393
	NotifyESPTFCPaddingNotSupp   NotifyType = 16394
	NotifyNonFirstFragmentsAlso  NotifyType = 16395
	NotifyMobikeSupported        NotifyType = 16396
	NotifyFragmentationSupported NotifyType = 16430
	NotifySignatureHashAlgs      NotifyType = 16431
)

var notifyNames = map[NotifyType]string{
	NotifyUnsupportedCriticalPayload: "UNSUPPORTED_CRITICAL_PAYLOAD", NotifyInvalidIKESPI: "INVALID_IKE_SPI",
	NotifyInvalidMajorVersion: "INVALID_MAJOR_VERSION", NotifyInvalidSyntax: "INVALID_SYNTAX",
	NotifyInvalidMessageID: "INVALID_MESSAGE_ID", NotifyInvalidSPI: "INVALID_SPI",
	NotifyNoProposalChosen: "NO_PROPOSAL_CHOSEN", NotifyInvalidKEPayload: "INVALID_KE_PAYLOAD",
	NotifyAuthenticationFailed: "AUTHENTICATION_FAILED", NotifySinglePairRequired: "SINGLE_PAIR_REQUIRED",
	NotifyNoAdditionalSAs: "NO_ADDITIONAL_SAS", NotifyInternalAddressFailure: "INTERNAL_ADDRESS_FAILURE",
	NotifyFailedCPRequired: "FAILED_CP_REQUIRED", NotifyTSUnacceptable: "TS_UNACCEPTABLE",
	NotifyInvalidSelectors: "INVALID_SELECTORS", NotifyTemporaryFailure: "TEMPORARY_FAILURE",
	NotifyChildSANotFound: "CHILD_SA_NOT_FOUND", NotifyInitialContact: "INITIAL_CONTACT",
	NotifySetWindowSize: "SET_WINDOW_SIZE", NotifyAdditionalTSPossible: "ADDITIONAL_TS_POSSIBLE",
	NotifyIPCompSupported: "IPCOMP_SUPPORTED", NotifyNATDetectionSourceIP: "NAT_DETECTION_SOURCE_IP",
	NotifyNATDetectionDestIP: "NAT_DETECTION_DESTINATION_IP", NotifyCookie: "COOKIE",
	NotifyUseTransportMode: "USE_TRANSPORT_MODE", NotifyHTTPCertLookup: "HTTP_CERT_LOOKUP_SUPPORTED",
	NotifyRekeySA: "REKEY_SA", NotifyESPTFCPaddingNotSupp: "ESP_TFC_PADDING_NOT_SUPPORTED",
	NotifyNonFirstFragmentsAlso: "NON_FIRST_FRAGMENTS_ALSO", NotifyMobikeSupported: "MOBIKE_SUPPORTED",
	NotifyFragmentationSupported: "IKEV2_FRAGMENTATION_SUPPORTED", NotifySignatureHashAlgs: "SIGNATURE_HASH_ALGORITHMS",
}

func (n NotifyType) String() string { return nameOf(notifyNames, n, "notify") }

// IsError reports whether the notification is an error (types below 16384).
func (n NotifyType) IsError() bool { return n < 16384 }
