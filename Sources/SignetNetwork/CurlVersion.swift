internal import CSignetCurl
import SignetCore

extension SignetVersion {
    /// The libcurl library loaded at run time (loading it, if no download has yet).
    public static var curl: String { String(cString: signet_curl_version()) }
}
